"""A PNG of a viewer page (`mt attention --html`, `mt vectors --html`) in headless Chromium.

    python -m scripts.tools.screenshot attn.html attn.png \
        [--select Attention=cross --select Head=mean]

Needs Debian's chromium and chromium-driver and selenium (the `[test]` extra). `--select
LABEL=VALUE` picks an option of the page's select labelled LABEL before the picture is taken;
`--hover ROW,COL` hovers that heatmap cell so the picture shows its weight.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from selenium.webdriver.common.action_chains import ActionChains

from tests.support.browser import chromium, select_by_label


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--select", action="append", default=[], metavar="LABEL=VALUE")
    parser.add_argument("--hover", metavar="ROW,COL")
    parser.add_argument("--size", default="1100,900", metavar="W,H")
    args = parser.parse_args()
    driver = chromium(args.size)
    try:
        driver.get(args.page.resolve().as_uri())
        select_by_label(driver, args.select)
        if args.hover:
            row, col = args.hover.split(",")
            cell = driver.find_element("css selector", f'td[data-row="{row}"][data-col="{col}"]')
            ActionChains(driver).move_to_element(cell).perform()
        driver.save_screenshot(str(args.png))
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
