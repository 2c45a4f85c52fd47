"""`mt serve` with one multilingual model: every direction through /v1/translate ("to" and
"from"), LibreTranslate's /languages, `source: "auto"` and /detect through its own Python
client, and the page's From/To selectors and swap button in headless Chromium."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from support.processes import start_server

GERMAN = "Ein Mann fährt mit dem Fahrrad durch die Stadt."


@pytest.fixture(scope="module")
def server(multi_run: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("serve-multi")
    srv = start_server(multi_run / "best.pt", "--device", "cpu", log=folder / "server.log")
    yield srv
    assert srv.stop() == 0


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60)


def test_one_model_serves_each_direction(server):
    items = [{"src": GERMAN, "to": "en"}, {"src": GERMAN, "to": "fr", "from": "de"}]
    got = post(server, "/v1/translate", {"items": items, "options": {"beam": 1}})
    assert got.status_code == 200, got.text
    en, fr = (i["translation"] for i in got.json()["items"])
    # The body's "to" holds for items that name none: the same answers, one by one.
    for to, want in (("en", en), ("fr", fr)):
        one = post(server, "/v1/translate", {"items": [{"src": GERMAN}], "to": to,
                                             "options": {"beam": 1}})  # fmt: skip
        assert one.json()["items"][0]["translation"] == want
    models = httpx.get(server.url + "/v1/models", timeout=30).json()["models"][0]
    assert [tuple(d) for d in models["directions"]] == [
        ("de", "en"), ("en", "de"), ("en", "fr"), ("fr", "en")
    ]  # fmt: skip
    assert sorted(models["languages"]) == ["de", "en", "fr"]
    score = post(server, "/v1/score", {"items": [{"src": GERMAN, "tgt": fr}], "to": "fr"})
    assert score.status_code == 200 and score.json()["items"][0]["logprob"] < 0
    att = post(server, "/v1/attention", {"src": GERMAN, "to": "fr"})
    assert att.status_code == 200 and att.json()["kinds"][1]["cols"][0] == "<2fr>"


@pytest.mark.parametrize(
    "body, needle",
    [
        ({"items": [{"src": GERMAN}]}, "say which with 'to'"),
        ({"items": [{"src": GERMAN, "to": "cs"}]}, "does not write 'cs'"),
        ({"items": [{"src": GERMAN, "to": "fr", "from": "xx"}]}, "does not read 'xx'"),
        ({"items": [{"src": GERMAN, "to": 3}]}, "'to' must be a language code"),
    ],
)
def test_bad_languages_are_a_4xx_naming_the_languages(server, body, needle):
    got = post(server, "/v1/translate", body)
    assert 400 <= got.status_code < 500
    assert needle in got.json()["error"], got.text
    if "must be" not in needle:
        assert all(code in got.json()["error"] for code in ("de", "en", "fr"))


def test_libretranslate_client_lists_detects_and_translates(server):
    from libretranslatepy import LibreTranslateAPI

    lt = LibreTranslateAPI(server.url + "/")
    listed = {x["code"]: sorted(x["targets"]) for x in lt.languages()}
    assert listed == {"de": ["en", "fr"], "en": ["de", "fr"], "fr": ["de", "en"]}
    for text, lang in (
        (GERMAN, "de"),
        ("A man rides his bicycle through the city.", "en"),
        ("Un homme fait du vélo dans la ville.", "fr"),
    ):
        found = lt.detect(text)
        assert found[0]["language"] == lang, found
        assert found[0]["confidence"] >= found[-1]["confidence"]
    explicit = lt.translate(GERMAN, "de", "fr")
    assert explicit and lt.translate(GERMAN, "auto", "fr") == explicit
    raw = post(server, "/translate", {"q": GERMAN, "source": "auto", "target": "fr"}).json()
    assert raw["detectedLanguage"]["language"] == "de"
    bad = post(server, "/translate", {"q": GERMAN, "source": "de", "target": "cs"})
    assert bad.status_code == 400 and "de, en, fr" in bad.json()["error"]


def test_page_has_from_to_selectors_and_a_swap_button(server, browser):  # noqa: F811
    from selenium.webdriver.support.ui import Select, WebDriverWait

    browser.get(server.url + "/")
    WebDriverWait(browser, 30).until(lambda d: d.find_element("id", "langs").is_displayed())
    frm, to = (Select(browser.find_element("id", k)) for k in ("from", "to"))
    assert sorted(o.get_attribute("value") for o in frm.options) == ["de", "en", "fr"]
    frm.select_by_value("de")
    to.select_by_value("fr")
    assert browser.find_element("id", "pair").text == "de → fr"
    browser.find_element("id", "src").send_keys(GERMAN)
    WebDriverWait(browser, 60).until(
        lambda d: d.find_element("tag name", "body").get_attribute("data-ready")
    )
    want = post(server, "/v1/translate", {"items": [{"src": GERMAN, "to": "fr"}]})
    shown = browser.find_element("id", "translation").text
    assert shown == want.json()["items"][0]["translation"]
    browser.find_element("id", "swap").click()
    assert (frm.first_selected_option.get_attribute("value"), to.first_selected_option.
            get_attribute("value")) == ("fr", "de")  # fmt: skip
    assert browser.find_element("id", "src").get_attribute("value") == shown
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
