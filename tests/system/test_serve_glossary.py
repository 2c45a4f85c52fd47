"""Glossaries over real HTTP: inline per request, uploaded once and named by id (a key's own),
the server's own, in /v1/translate and LibreTranslate's /translate."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from support.processes import start_server

KEY, OTHER = "k" * 20, "o" * 20
AUTH = {"Authorization": f"Bearer {KEY}"}
SRC = ["Ein Mann fährt Fahrrad.", "Zwei Kinder spielen.", "Eine Frau mit zwei Männern."]


@pytest.fixture(scope="module")
def server(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("serve-glossary")
    keys = folder / "keys.txt"
    keys.write_text(f"{KEY}\n{OTHER}\n", encoding="utf-8")
    own = folder / "server.tsv"
    own.write_text("de\ten\nKind\tyoungster\n", encoding="utf-8")
    srv = start_server(
        str(tiny_run / "best.pt"),
        *("--device", "cpu", "--api-key-file", keys, "--max-glossary-entries", "3"),
        *("--glossary", own),
        log=folder / "server.log",
    )
    yield srv
    assert srv.stop() == 0


def post(server, path: str, body: object, key: str = KEY) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.post(server.url + path, json=body, headers=headers, timeout=60)


def translations(r: httpx.Response) -> list[str]:
    assert r.status_code == 200, r.text
    return [x["translation"] for x in r.json()["items"]]


def test_an_inline_glossary_changes_the_lines_with_its_terms_as_the_cli_does(
    server, tiny_run, mt_cli, tmp_path
):
    items = [{"src": x} for x in SRC]
    plain = translations(post(server, "/v1/translate", {"items": items}))
    terms = {"Mann": "gent", "Frau": "lady"}
    got = translations(post(server, "/v1/translate", {"items": items, "glossary": terms}))
    assert "gent" in got[0] and "lady" in got[2] and "gent" in got[2]
    assert got[0] != plain[0] and got[2] != plain[2]
    # the server's own glossary (Kind -> youngster) is for requests that give none
    assert "youngster" in plain[1] and "youngster" not in got[1]
    # the CLI with the same terms in a file writes the same lines
    src, tsv = tmp_path / "src.de", tmp_path / "terms.tsv"
    src.write_text("\n".join(SRC) + "\n", encoding="utf-8")
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in terms.items()), encoding="utf-8")
    cli = mt_cli("translate", tiny_run / "best.pt", "-i", src, "--glossary", tsv)
    assert cli.rc == 0, cli.err
    assert cli.out.splitlines()[0] == got[0] and cli.out.splitlines()[2] == got[2]


def test_uploaded_glossaries_are_listed_used_and_deleted_by_their_key_only(server):
    up = post(server, "/v1/glossaries", {"name": "dogs", "from": "de", "to": "en",
                                         "content": "Mann\tgent\nFrau\tlady\n"})  # fmt: skip
    assert up.status_code == 201, up.text
    info = up.json()
    assert info["entries"] == 2 and info["name"] == "dogs" and info["from"] == "de"
    gid = info["id"]
    listed = httpx.get(server.url + "/v1/glossaries", headers=AUTH, timeout=10).json()
    assert [g["id"] for g in listed["glossaries"]] == [gid]
    other = {"Authorization": f"Bearer {OTHER}"}
    assert httpx.get(server.url + "/v1/glossaries", headers=other).json()["glossaries"] == []
    assert httpx.get(server.url + f"/v1/glossaries/{gid}", headers=other).status_code == 404
    one = httpx.get(server.url + f"/v1/glossaries/{gid}", headers=AUTH).json()
    assert one["terms"] == {"Mann": "gent", "Frau": "lady"}

    items = [{"src": x} for x in SRC]
    got = translations(post(server, "/v1/translate", {"items": items, "glossary": gid}))
    assert "gent" in got[0] and "lady" in got[2]
    r = post(server, "/v1/translate", {"items": items, "glossary": gid}, key=OTHER)
    assert r.status_code == 404 and "no glossary" in r.json()["error"]
    fr = post(server, "/v1/translate", {"items": items, "glossary": gid, "to": "fr"})
    assert fr.status_code in (422, 400)  # a bilingual de-en model: 'to' fr is refused

    assert httpx.delete(server.url + f"/v1/glossaries/{gid}", headers=other).status_code == 404
    gone = httpx.delete(server.url + f"/v1/glossaries/{gid}", headers=AUTH)
    assert gone.status_code == 200 and gone.json() == {"deleted": gid}
    assert post(server, "/v1/translate", {"items": items, "glossary": gid}).status_code == 404


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"entries": {"a": "b", "c": "d", "e": "f", "g": "h"}}, 413, "the limit is 3"),
        ({"content": "Hund\thound\nKatze\n", "name": "x.tsv"}, 422, "x.tsv:2: expected 2"),
        ({"content": "<tmx><body>", "format": "tmx", "name": "t"}, 422, "t:1: not well-formed"),
        ({"entries": {"Hund": ""}}, 422, "the target term is empty"),
        ({"entries": {}, "content": "x"}, 422, "as 'entries' (an object) or as 'content'"),
    ],
)
def test_bad_uploads_get_one_line(server, body, status, says):
    r = post(server, "/v1/glossaries", body)
    assert r.status_code == status and says in r.json()["error"], r.text


def test_a_glossary_needs_beam_search_and_a_well_formed_value(server):
    items = [{"src": SRC[0]}]
    r = post(server, "/v1/translate", {"items": items, "glossary": {"Mann": "gent"},
                                        "options": {"greedy": True}})  # fmt: skip
    assert r.status_code == 422 and "constrained beam search" in r.json()["error"]
    r = post(server, "/v1/translate", {"items": items, "glossary": ["Mann", "gent"]})
    assert r.status_code == 422 and "'glossary' must be an object" in r.json()["error"]


def test_libretranslate_takes_a_glossary_as_an_extension(server):
    body = {"q": SRC, "source": "de", "target": "en", "api_key": KEY}
    plain = httpx.post(server.url + "/translate", json=body, timeout=60).json()["translatedText"]
    body["glossary"] = {"Frau": "lady"}
    got = httpx.post(server.url + "/translate", json=body, timeout=60).json()["translatedText"]
    assert "lady" in got[2] and got[0] == plain[0]
    form = {"q": SRC[2], "source": "de", "target": "en", "api_key": KEY,
            "glossary": json.dumps({"Frau": "lady"})}  # fmt: skip
    r = httpx.post(server.url + "/translate", data=form, timeout=60)
    assert r.status_code == 200 and r.json()["translatedText"] == got[2]
    body["format"] = "html"
    r = httpx.post(server.url + "/translate", json=body, timeout=60)
    assert r.status_code == 400 and "format text only" in r.json()["error"]
