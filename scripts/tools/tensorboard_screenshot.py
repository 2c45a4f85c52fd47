"""A PNG of a run in TensorBoard: curves, the attention image and a dev example, stacked.

    python -m scripts.tools.tensorboard_screenshot runs/multi30k_de_en docs/tensorboard.png \
        [--tags 'dev/bleu|train/loss'] [--example 1]

Starts `tensorboard` on a free loopback port showing this run as `tensorboard --logdir runs/`
names it, opens it in headless Chromium, and takes three pictures: the Time Series tab
filtered to `--tags` (a regex, typed into TensorBoard's tag filter), the Images tab's
`dev/attention` and the Text tab's `dev/example_N`; the tops of the three (`--heights`) are
stacked into PNG. Needs the `[tensorboard]` and `[test]` extras and Debian's chromium and
chromium-driver.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from PIL import Image
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.browser import chromium
from tests.support.processes import free_port


def start_tensorboard(run_dir: Path, port: int) -> subprocess.Popen:
    """TensorBoard on 127.0.0.1:`port` showing this run alone, named as `tensorboard --logdir
    runs/` names it (RUN/tensorboard): its logdir is a folder holding a link to the run."""
    logdir = Path(tempfile.mkdtemp(prefix="tb-shot-"))
    (logdir / run_dir.resolve().name).symlink_to(run_dir.resolve(), target_is_directory=True)
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir)),
            *("--host", "127.0.0.1", "--port", str(port), "--reload_interval", "0"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/data/runs", timeout=2).json():
                return proc
        except (httpx.TransportError, ValueError):
            pass
        if proc.poll() is not None:
            raise SystemExit(f"tensorboard exited {proc.returncode}")
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("tensorboard did not list the run within 60 s")


def shot(driver) -> Image.Image:
    return Image.open(io.BytesIO(driver.get_screenshot_as_png())).convert("RGB")


def filter_tags(driver, placeholder: str, regex: str) -> None:
    """Type `regex` into the tag filter box whose placeholder starts with `placeholder`."""
    box = WebDriverWait(driver, 60).until(
        lambda d: next(
            (
                e
                for e in d.find_elements(By.TAG_NAME, "input")
                if (e.get_attribute("placeholder") or "").startswith(placeholder)
                and e.is_displayed()
            ),
            None,
        )
    )
    box.clear()
    box.send_keys(regex, Keys.ENTER)


# Finds elements through shadow roots too (TensorBoard's Polymer tabs live in shadow DOM):
# every element whose tag name contains arguments[0] and whose text is arguments[1].
DEEP_FIND = """
const [tagPart, text] = arguments, found = [];
function walk(root) {
  for (const el of root.querySelectorAll("*")) {
    if (el.tagName.toLowerCase().includes(tagPart) && el.textContent.trim() === text) {
      found.push(el);
    }
    if (el.shadowRoot) walk(el.shadowRoot);
  }
}
walk(document);
return found;
"""


def click_deep(driver, tag_part: str, text: str) -> None:
    """Click the first element (through shadow roots) of tag `*tag_part*` reading `text`."""
    found = driver.execute_script(DEEP_FIND, tag_part, text)
    if not found:
        raise SystemExit(f"no {tag_part} reading {text!r} on {driver.current_url}")
    found[0].click()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--tags", default="dev/bleu|train/loss")
    parser.add_argument("--example", type=int, default=1, help="which dev/example_N to show")
    parser.add_argument("--size", default="1300,1000", metavar="W,H")
    parser.add_argument(
        "--heights",
        type=int,
        nargs=3,
        default=(530, 700, 400),
        metavar=("CURVES", "IMAGE", "TEXT"),
        help="pixels kept of each tab's picture, from the top",
    )
    args = parser.parse_args()
    port = free_port()
    board = start_tensorboard(args.run_dir, port)
    driver = chromium(args.size)
    url = f"http://127.0.0.1:{port}/"
    parts = []
    try:
        driver.get(url + "#timeseries")
        filter_tags(driver, "Filter tags", args.tags)
        # Charts scaled to all their points (TensorBoard's default ignores "outliers", which on
        # a dev curve of a few points are most of the curve), then the settings pane away.
        driver.find_element(
            By.XPATH, "//*[normalize-space(text())='Ignore outliers in chart scaling']"
        ).click()
        driver.find_element(By.CSS_SELECTOR, 'button[aria-label="Close side pane"]').click()
        time.sleep(4)  # the line charts draw after their data arrives
        parts.append(shot(driver))
        # The Images and Text tabs filter inside shadow DOM; their filter also lives in the
        # URL. Images show at their own size there, with the step slider above.
        driver.get(url + "#images&tagFilter=dev%2Fattention")
        time.sleep(5)  # rendered inside shadow DOM: no element to wait on
        click_deep(driver, "checkbox", "Show actual image size")
        time.sleep(2)
        parts.append(shot(driver))
        driver.get(url + f"#text&tagFilter=dev%2Fexample_{args.example}")
        time.sleep(5)
        parts.append(shot(driver))
    finally:
        driver.quit()
        board.terminate()
        board.wait(30)
    parts = [p.crop((0, 0, p.width, h)) for p, h in zip(parts, args.heights)]
    out = Image.new("RGB", (parts[0].width, sum(p.height for p in parts)), "white")
    for k, part in enumerate(parts):
        out.paste(part, (0, sum(p.height for p in parts[:k])))
    out.save(args.png, optimize=True)
    print(f"wrote {args.png} ({out.width}x{out.height})")


if __name__ == "__main__":
    main()
