"""The page at `/` of a real `mt serve`, in real headless Chromium (Debian's chromium and
chromium-driver; `.ci/run` installs them): typing shows the translation, the n-best list, the
token probabilities and the attention, and the weights drawn are those /v1/attention returns.
The screenshot is saved under pytest's tmp dir and its path printed."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import torch
from support.processes import start_server

SENTENCE = "Ein Hund rennt im Park."


@pytest.fixture(scope="module")
def server(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("serve-page")
    srv = start_server(tiny_run / "best.pt", "--device", "cpu", log=folder / "server.log")
    yield srv
    assert srv.stop() == 0


def choose(driver, label: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    label_el = driver.find_element("xpath", f"//label[text()='{label}']")
    Select(driver.find_element("id", label_el.get_attribute("for"))).select_by_value(value)


def drawn(driver, rows: int, cols: int) -> torch.Tensor:
    cells = driver.find_elements("css selector", "#attention table.mtv-grid td[data-weight]")
    assert len(cells) == rows * cols
    return torch.tensor([float(c.get_attribute("data-weight")) for c in cells]).view(rows, cols)


def focus_colours(driver, element) -> list[tuple[int, int, int]]:
    """The outline and border colours the browser draws around `element`, as RGB."""
    style = driver.execute_script(
        "var s = getComputedStyle(arguments[0]);"
        "return [s.outlineStyle === 'none' ? '' : s.outlineColor, s.borderTopColor];",
        element,
    )
    found = []
    for css in filter(None, style):
        parts = css[css.index("(") + 1 : css.index(")")].replace(",", " ").split()
        found.append(tuple(int(float(p)) for p in parts[:3]))
    return found


def looks_red(rgb: tuple[int, int, int]) -> bool:
    r, g, b = rgb
    return r > 150 and r > 2 * g and r > 2 * b


def test_typing_shows_translation_tokens_and_attention(server, browser, tmp_path):
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server.url + "/")
    WebDriverWait(browser, 30).until(
        lambda d: d.find_element("id", "pair").text == "de → en"
    )  # the page asked /v1/models
    box = browser.find_element("id", "src")
    assert browser.switch_to.active_element == box  # the cursor starts in the box
    for colour in focus_colours(browser, box):  # its focus frame must not read as an error
        assert not looks_red(colour), colour
    box.send_keys(SENTENCE)
    WebDriverWait(browser, 60).until(
        lambda d: d.find_element("tag name", "body").get_attribute("data-ready")
    )
    want = httpx.post(
        server.url + "/v1/translate", json={"items": [{"src": SENTENCE}]}, timeout=60
    ).json()["items"][0]
    assert browser.find_element("id", "translation").text == want["translation"]
    nbest = browser.find_elements("css selector", "#nbest li")
    assert 1 <= len(nbest) <= 5 and nbest[0].text.startswith(want["translation"])
    scored = httpx.post(
        server.url + "/v1/score",
        json={"items": [{"src": SENTENCE, "tgt": want["translation"]}]},
        timeout=60,
    ).json()["items"][0]
    tokens = browser.find_elements("css selector", "#tokens .tok")
    assert [t.text for t in tokens] == scored["tokens"]
    probs = [float(t.get_attribute("data-p")) for t in tokens]
    assert probs == pytest.approx([2.718281828459045**lp for lp in scored["token_logprobs"]])

    data = httpx.post(server.url + "/v1/attention", json={"src": SENTENCE}, timeout=60).json()
    enc, _, cross = data["kinds"]
    n_src, n_out = len(enc["rows"]), len(cross["rows"])
    # Default view: the translation's encoder-decoder attention, last layer, mean over heads.
    mean = torch.tensor(cross["weights"][-1]).mean(0)
    torch.testing.assert_close(drawn(browser, n_out, n_src), mean, atol=1e-6, rtol=0)
    # Choosing a kind, layer and head redraws with exactly that head's weights.
    choose(browser, "Attention", "encoder")
    choose(browser, "Layer", "0")
    choose(browser, "Head", "1")
    want_w = torch.tensor(enc["weights"][0][1])
    torch.testing.assert_close(drawn(browser, n_src, n_src), want_w, atol=1e-7, rtol=0)
    choose(browser, "Attention", "cross")
    want_w = torch.tensor(cross["weights"][0][1])
    torch.testing.assert_close(drawn(browser, n_out, n_src), want_w, atol=1e-7, rtol=0)
    lines = browser.find_elements("css selector", "#attention svg line.mtv-link")
    assert len(lines) == len(data["alignment"]["pairs"])

    # Nothing came from anywhere but this server.
    urls = browser.execute_script(
        "return performance.getEntriesByType('resource').map(function (e) { return e.name; })"
    )
    assert urls and all(u.startswith(server.url + "/") for u in urls)
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    shot = tmp_path / "serve_page.png"
    browser.save_screenshot(str(shot))
    print(f"screenshot: {shot}")


def test_page_asks_for_the_api_key_a_server_needs(tiny_run, browser, tmp_path):
    """With --api-key-file every call needs a key: the page asks for one, says when it was
    refused, and translates once given the right one (sent as a Bearer header)."""
    from selenium.webdriver.support.ui import WebDriverWait

    key = "page-test-key-0123456789"
    keys = tmp_path / "keys.txt"
    keys.write_text(f"# one key\n{key}\n")
    srv = start_server(
        tiny_run / "best.pt", "--device", "cpu", "--api-key-file", keys,
        log=tmp_path / "server.log",
    )  # fmt: skip
    try:
        browser.get(srv.url + "/")
        form = browser.find_element("id", "key-form")
        status = browser.find_element("id", "status")
        WebDriverWait(browser, 30).until(lambda d: form.is_displayed())
        assert status.text == "This server needs an API key."
        assert browser.find_element("id", "pair").text == ""  # /v1/models was refused
        field = browser.find_element("id", "api-key")
        assert browser.switch_to.active_element == field
        field.send_keys("not-the-key-0123456789\n")
        WebDriverWait(browser, 30).until(lambda d: form.is_displayed())
        WebDriverWait(browser, 30).until(lambda d: "refused" in status.text)
        field.send_keys(key + "\n")
        WebDriverWait(browser, 30).until(lambda d: d.find_element("id", "pair").text == "de → en")
        assert not form.is_displayed()
        browser.find_element("id", "src").send_keys(SENTENCE)
        WebDriverWait(browser, 60).until(
            lambda d: d.find_element("tag name", "body").get_attribute("data-ready")
        )
        want = httpx.post(
            srv.url + "/v1/translate",
            json={"items": [{"src": SENTENCE}]},
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        ).json()["items"][0]["translation"]
        assert browser.find_element("id", "translation").text == want
        assert browser.find_elements("css selector", "#attention table.mtv-grid td")
    finally:
        assert srv.stop() == 0
