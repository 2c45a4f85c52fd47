"""A PNG of `mt serve`'s page after typing a sentence, in headless Chromium (README, docs).

    python -m scripts.tools.serve_screenshot runs/multi30k_de_en/best.pt docs/serve_page.png \
        [--src "Ein Hund rennt im Park."] [--select Attention=cross]

Starts the server on a free loopback port, types the sentence, waits for the translation and
its attention, picks `--select LABEL=VALUE` options of the viewer, saves the picture, and stops
the server. Needs Debian's chromium and chromium-driver and selenium (the `[test]` extra).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from selenium.webdriver.support.ui import WebDriverWait

from tests.support.browser import chromium, select_by_label
from tests.support.processes import start_server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--src", default="Ein Hund rennt im Park.")
    parser.add_argument("--select", action="append", default=[], metavar="LABEL=VALUE")
    parser.add_argument("--size", default="1100,1300", metavar="W,H")
    args = parser.parse_args()
    log = Path(tempfile.mkdtemp(prefix="serve-shot-")) / "server.log"
    server = start_server(args.checkpoint, "--device", "cpu", log=log)
    driver = chromium(args.size)
    try:
        driver.get(server.url + "/")
        WebDriverWait(driver, 30).until(lambda d: d.find_element("id", "pair").text)
        driver.find_element("id", "src").send_keys(args.src)
        WebDriverWait(driver, 120).until(
            lambda d: d.find_element("tag name", "body").get_attribute("data-ready")
        )
        select_by_label(driver, args.select)
        driver.save_screenshot(str(args.png))
    finally:
        driver.quit()
        server.stop()


if __name__ == "__main__":
    main()
