"""The HTML viewer in a real headless Chromium, offline: one cell per weight, the model's weights.

Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them) and selenium (the
`[test]` extra). A screenshot of each page is saved under pytest's tmp dir and its path printed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.browser import chromium
from support.browser import missing as browser_missing

from mt.checkpoint import load_model
from mt.viewer import page, write_html
from mt.views.attention import attention_json, translate_with_attention
from mt.views.vectors import word_vectors


@pytest.fixture(scope="module")
def browser():
    if why := browser_missing():
        pytest.skip(why)
    driver = chromium("1200,1200")
    # No network at all: the page must need none.
    driver.set_network_conditions(
        offline=True, latency=0, download_throughput=0, upload_throughput=0
    )
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def loaded(tiny_run):
    return load_model(tiny_run / "best.pt")


def open_page(driver, path: Path) -> None:
    driver.get(path.resolve().as_uri())
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def cells(driver) -> list:
    return driver.find_elements("css selector", "table.mtv-grid td[data-weight]")


def choose(driver, label: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    label_el = driver.find_element("xpath", f"//label[text()='{label}']")
    Select(driver.find_element("id", label_el.get_attribute("for"))).select_by_value(value)


def test_attention_page_shows_the_models_weights(browser, loaded, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains

    att = translate_with_attention(
        loaded.model, loaded.tokenizer, "Ein Hund rennt im Park.", loaded.cfg.decode
    )
    data = attention_json(att)
    html = tmp_path / "attention.html"
    write_html(html, data, "attention")
    text = html.read_text(encoding="utf-8")
    assert "src=" not in text and "href=" not in text  # nothing to fetch
    open_page(browser, html)

    n_src, n_out = len(att.src_tokens), len(att.tgt_out_tokens)
    n_layers, n_heads = len(att.maps.encoder), loaded.cfg.model.n_heads
    # Default: encoder-decoder attention, last layer, mean of heads; one cell per weight.
    drawn = cells(browser)
    assert len(drawn) == n_out * n_src
    mean = att.maps.cross[-1][0].mean(0)
    got = torch.tensor([float(c.get_attribute("data-weight")) for c in drawn]).view(n_out, n_src)
    torch.testing.assert_close(got, mean, atol=1e-6, rtol=0)

    # Switching kind, layer and head redraws with that head's weights.
    choose(browser, "Attention", "encoder")
    choose(browser, "Layer", "0")
    choose(browser, "Head", "1")
    drawn = cells(browser)
    assert len(drawn) == n_src * n_src
    want = att.maps.encoder[0][0, 1]
    got = torch.tensor([float(c.get_attribute("data-weight")) for c in drawn]).view(n_src, n_src)
    torch.testing.assert_close(got, want, atol=1e-7, rtol=0)
    choose(browser, "Attention", "cross")  # layer 1, head 2 stay chosen
    want = att.maps.cross[0][0, 1]
    assert "layer 1 of" in browser.find_element("css selector", "caption").text

    # Hovering a cell shows the weight the model computed and both tokens.
    i, j = n_out // 2, n_src // 2
    cell = browser.find_element("css selector", f'td[data-row="{i}"][data-col="{j}"]')
    ActionChains(browser).move_to_element(cell).perform()
    status = browser.find_element("css selector", ".mtv-status").text
    assert f"{float(want[i, j]):.4f}" in status
    assert att.tgt_out_tokens[i] in status and att.src_tokens[j] in status

    choose(browser, "Attention", "decoder")
    choose(browser, "Layer", str(n_layers - 1))
    choose(browser, "Head", str(n_heads - 1))
    assert len(cells(browser)) == n_out * (n_out)  # rows: predicted; cols: <s> + pieces

    # Keyboard: arrow keys move the focus from cell to cell.
    first = browser.find_element("css selector", 'td[data-row="0"][data-col="0"]')
    first.click()
    from selenium.webdriver.common.keys import Keys

    first.send_keys(Keys.ARROW_DOWN)
    focused = browser.switch_to.active_element
    assert (focused.get_attribute("data-row"), focused.get_attribute("data-col")) == ("1", "0")

    lines = browser.find_elements("css selector", "svg line.mtv-link")
    assert len(lines) == len(data["alignment"]["pairs"]) == n_out - 1
    shot = tmp_path / "attention.png"
    browser.save_screenshot(str(shot))
    print(f"screenshot: {shot}")


def test_vectors_page_draws_every_point(browser, loaded, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains

    sentences = ["Ein Mann sitzt auf einer Bank.", "Eine Frau geht zur Bank."]
    found = word_vectors(loaded.model, loaded.tokenizer, sentences, "Bank")
    html = tmp_path / "vectors.html"
    write_html(html, found.to_json(), "vectors")
    open_page(browser, html)
    points = browser.find_elements("css selector", "circle.mtv-point")
    assert len(points) == len(found.occurrences) * len(found.depths)
    last = browser.find_element("css selector", 'circle[data-occurrence="1"][data-depth="2"]')
    ActionChains(browser).move_to_element(last).perform()
    status = browser.find_element("css selector", ".mtv-status").text
    top = found.occurrences[1].pushed_by[1][0]
    assert "layer 2" in status and f"{top.token} ({top.along:.2f})" in status
    shot = tmp_path / "vectors.png"
    browser.save_screenshot(str(shot))
    print(f"screenshot: {shot}")


def test_inlined_data_cannot_close_the_script():
    html = page({"view": "attention", "source": "</script><script>alert(1)</script>"}, "t")
    assert html.count("</script>") == 3  # the data, the viewer and the call
