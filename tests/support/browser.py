"""Headless Chromium for the viewer and page tests and the screenshot tools: one driver set-up.

Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them) and selenium (the
`[test]` extra). Tests skip when `missing()` names something; the tools fail with it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def missing() -> str | None:
    """Why no browser can start here (None when one can)."""
    if not (Path(CHROMIUM).is_file() and Path(DRIVER).is_file()):
        return "chromium and chromedriver are not installed (apt-get install chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (the [test] extra)"
    return None


def chromium(size: str) -> Any:
    """Debian's headless Chromium through its chromedriver, the window `size` ("W,H")."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", f"--window-size={size}"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(DRIVER))


def select_by_label(driver: Any, items: list[str]) -> None:
    """Pick `LABEL=VALUE` in the page's select labelled LABEL, for each item."""
    from selenium.webdriver.support.ui import Select

    for item in items:
        label, value = item.split("=", 1)
        for_id = driver.find_element("xpath", f"//label[text()='{label}']").get_attribute("for")
        Select(driver.find_element("id", for_id)).select_by_value(value)
