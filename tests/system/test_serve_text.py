"""`mt serve` with text as people send it: paragraphs split by sentence (newlines kept), doubt
flags in the answers and the metrics, and LibreTranslate's html, alternatives and files (the
CAT tools' XLIFF and TMX read back by translate-toolkit)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from support.processes import Server, start_server

from mt.data.corpus import read_lines


@pytest.fixture(scope="module")
def server(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("serve_text")
    # Numbers are kept by default: no flag (test_keep_numbers_puts_every_number_back).
    srv = start_server(tiny_run / "best.pt", "--device", "cpu", log=folder / "server.log")
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def test_de(multi30k_dir: Path) -> list[str]:
    return [x.strip() for x in read_lines(multi30k_dir / "test_2016_flickr.de.gz")]


def post(server: Server, path: str, body: object) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=120)


def one_by_one(server: Server, sentences: list[str]) -> list[str]:
    items = [{"src": s} for s in sentences]
    r = post(server, "/v1/translate", {"items": items, "split_sentences": False})
    assert r.status_code == 200, r.text
    return [a["translation"] for a in r.json()["items"]]


def test_paragraphs_are_split_and_their_newlines_kept(server, test_de):
    first, second = " ".join(test_de[:3]), " ".join(test_de[3:5])
    paragraph = f"{first}\n\n{second}\n"
    r = post(server, "/v1/translate", {"items": [{"src": paragraph}, {"src": test_de[5]}]})
    assert r.status_code == 200, r.text
    got = r.json()["items"]
    alone = one_by_one(server, test_de[:6])
    assert got[0]["translation"] == " ".join(alone[:3]) + "\n\n" + " ".join(alone[3:5]) + "\n"
    assert got[1]["translation"] == alone[5]
    assert isinstance(got[0]["flags"], list) and got[0]["confidence"] < 0
    whole = post(server, "/v1/translate", {"items": [{"src": paragraph}], "split_sentences": False})
    assert "\n" not in whole.json()["items"][0]["translation"]  # one line to the model
    aligned = post(server, "/v1/translate", {"items": [{"src": paragraph}], "options": {
        "alignment": True}})  # fmt: skip
    assert aligned.json()["items"][0]["translation"] == whole.json()["items"][0]["translation"]
    bad = post(server, "/v1/translate", {"items": [{"src": "x"}], "split_sentences": "yes"})
    assert bad.status_code == 422 and "split_sentences" in bad.json()["error"]


def test_libretranslate_keeps_lines(server, test_de):
    from libretranslatepy import LibreTranslateAPI

    lt = LibreTranslateAPI(server.url + "/")
    text = f"{test_de[0]} {test_de[1]}\n{test_de[2]}"
    alone = one_by_one(server, test_de[:3])
    assert lt.translate(text, "de", "en") == f"{alone[0]} {alone[1]}\n{alone[2]}"


def test_metrics_count_doubtful_translations(server):
    def count(flag: str) -> int:
        text = httpx.get(server.url + "/metrics", timeout=30).text
        line = next(x for x in text.splitlines() if x.startswith(f'{name}{{flag="{flag}"}}'))
        return int(line.split()[-1])

    def total() -> int:
        text = httpx.get(server.url + "/metrics", timeout=30).text
        return int(
            next(x for x in text.splitlines() if x.startswith("mt_translations_total ")).split()[-1]
        )

    name = "mt_doubtful_translations_total"
    before, answered = count("copy"), total()
    url = "https://example.com/ein/hund"  # protected whole: written back as it is, a copy
    r = post(server, "/v1/translate", {"items": [{"src": url}, {"src": url}]})
    assert [a["flags"] for a in r.json()["items"]] == [["copy"], ["copy"]]
    assert count("copy") == before + 2 and total() == answered + 2


def test_libretranslate_html_and_alternatives(server):
    from mt.spans.markup import parse_fragment

    fragment = '<p>Ein Mann <b>fährt</b> <a href="https://example.com/x">Fahrrad</a>.</p>'
    r = post(
        server, "/translate", {"q": fragment, "source": "de", "target": "en", "format": "html"}
    )
    assert r.status_code == 200, r.text
    out = r.json()["translatedText"]
    parse_fragment(out, "answer")  # well-formed: every tag closed, nested as sent
    assert out.startswith("<p>") and out.endswith("</p>") and 'href="https://example.com/x"' in out
    r = post(server, "/translate", {"q": ["Ein Hund.", "Ein Mann schläft."], "source": "de",
                                    "target": "en", "alternatives": 2})  # fmt: skip
    body = r.json()
    assert r.status_code == 200, r.text
    assert [len(a) for a in body["alternatives"]] == [2, 2]
    assert all(isinstance(x, str) for a in body["alternatives"] for x in a)
    bad = post(server, "/translate", {"q": "x", "source": "de", "target": "en", "format": "pdf"})
    assert bad.status_code == 400 and "format" in bad.json()["error"]


def upload(server: Server, name: str, data: bytes) -> httpx.Response:
    return httpx.post(
        server.url + "/translate_file",
        data={"source": "de", "target": "en"},
        files={"file": (name, data)},
        timeout=120,
    )


def download(server: Server, r: httpx.Response) -> bytes:
    assert r.status_code == 200, r.text
    url = r.json()["translatedFileUrl"]
    assert url.startswith(server.url + "/download_file/")
    got = httpx.get(url, timeout=30)
    assert got.status_code == 200
    return got.content


def test_translate_file_txt_srt_html_docx(server, test_de):
    import io

    import docx
    import srt

    txt = f"{test_de[0]} {test_de[1]}\n\n{test_de[2]}\n".encode()
    out = download(server, upload(server, "notes.txt", txt)).decode()
    alone = one_by_one(server, test_de[:3])
    assert out == f"{alone[0]} {alone[1]}\n\n{alone[2]}\n"

    subs = f"1\n00:00:01,000 --> 00:00:02,000\n{test_de[3]}\n\n2\n00:00:03,000 --> 00:00:04,500\n"
    subs += f"{test_de[4]}\n"
    got = list(srt.parse(download(server, upload(server, "film.srt", subs.encode())).decode()))
    assert [(s.index, s.start, s.end) for s in got] == [
        (s.index, s.start, s.end) for s in srt.parse(subs)
    ]
    assert [s.content for s in got] == one_by_one(server, test_de[3:5])

    page = f"<html><body><h1>{test_de[5]}</h1><p>{test_de[6]}</p></body></html>"
    out = download(server, upload(server, "page.html", page.encode())).decode()
    assert out == f"<html><body><h1>{alone_one(server, test_de[5])}</h1><p>" + (
        f"{alone_one(server, test_de[6])}</p></body></html>"
    )

    doc = docx.Document()
    doc.add_paragraph(test_de[7])
    doc.add_table(rows=1, cols=1).cell(0, 0).text = test_de[8]
    buf = io.BytesIO()
    doc.save(buf)
    got_doc = docx.Document(io.BytesIO(download(server, upload(server, "a.docx", buf.getvalue()))))
    assert got_doc.paragraphs[0].text == alone_one(server, test_de[7])
    assert got_doc.tables[0].cell(0, 0).text == alone_one(server, test_de[8])

    bad = upload(server, "a.pdf", b"%PDF")
    assert bad.status_code == 400 and ".pdf" in bad.json()["error"]
    assert httpx.get(server.url + "/download_file/nothing.txt", timeout=30).status_code == 404


def alone_one(server: Server, sentence: str) -> str:
    return one_by_one(server, [sentence])[0]


def test_frontend_settings(server):
    s = httpx.get(server.url + "/frontend/settings", timeout=30).json()
    assert s["supportedFilesFormat"] == [
        ".txt", ".html", ".srt", ".docx", ".xlf", ".xliff", ".tmx"
    ]  # fmt: skip
    assert s["language"]["source"]["code"] == "de" and s["language"]["target"]["code"] == "en"
    assert s["charLimit"] == 5000 and s["keyRequired"] is False


def test_keep_numbers_puts_every_number_back_by_default(server):
    from libretranslatepy import LibreTranslateAPI

    src = "Um 17:45 Uhr kamen 2.800 Menschen mit 678 Hunden."
    r = post(server, "/v1/translate", {"items": [{"src": src}]})
    out = r.json()["items"][0]["translation"]
    assert all(n in out for n in ("17:45", "2.800", "678")), out
    lt = LibreTranslateAPI(server.url + "/")
    assert "678" in lt.translate("Ein Mann mit 678 Hunden.", "de", "en")


def _lines_of(path: Path, dialect: str) -> list[str]:
    """The lines `mt translate` gives the model for a document's segments to fill."""
    from mt.cat.fill import XliffFill
    from mt.cat.tmx_fill import TmxFill

    if dialect == "tmx":
        doc = TmxFill(path.read_bytes(), str(path))
        doc.choose("de", "en")
    else:
        doc = XliffFill(path.read_bytes(), str(path))
    return [slot.text for slot in doc.slots]


@pytest.mark.parametrize("suffix", [".xlf", ".xliff", ".tmx"])  # XLIFF 2.0, XLIFF 1.2, TMX
def test_translate_file_fills_xliff_and_tmx(
    server, multi30k_dir, tiny_run, mt_cli, tmp_path, suffix
):
    """An XLIFF or TMX upload comes back filled as `mt translate --input-format` fills it:
    read by translate-toolkit, each target the CLI's translation of the same line, the inline
    codes of the source in it, the translator's target kept. An XLIFF file's `auto` source is
    its own."""
    import re

    from support.cat_files import coded, multi30k, write_tmx, write_xliff1, write_xliff2
    from translate.storage import tmx, xliff, xliff2

    pairs = multi30k(multi30k_dir, "test_2016_flickr", 12)
    todo = [(s, t if i == 1 else None) for i, (s, t) in enumerate(pairs)]
    write = {".xlf": write_xliff2, ".xliff": write_xliff1, ".tmx": write_tmx}[suffix]
    path = write(tmp_path / f"doc{suffix}", todo)
    r = httpx.post(
        server.url + "/translate_file",
        data={"source": "de" if suffix == ".tmx" else "auto", "target": "en"},
        files={"file": (path.name, path.read_bytes())},
        timeout=120,
    )
    out = download(server, r)
    lines = _lines_of(path, "tmx" if suffix == ".tmx" else "xliff")
    assert len(lines) == 11
    (tmp_path / "lines.de").write_text("".join(x + "\n" for x in lines))
    cli = mt_cli("translate", tiny_run / "best.pt", "-i", tmp_path / "lines.de")
    assert cli.rc == 0, cli.err
    expected = cli.out.splitlines()
    expected.insert(1, pairs[1][1])  # the translator's target, kept
    read = {".xlf": xliff2.Xliff2File, ".xliff": xliff.xlifffile, ".tmx": tmx.tmxfile}[suffix]
    store = read(out)
    codes = {".xlf": ["pc", "ph"], ".xliff": ["g", "x"]}.get(suffix)
    assert len(store.units) == 12
    for i, unit in enumerate(store.units):
        if suffix == ".xliff" and i != 1:
            assert unit.get_state_n() == xliff.xliffunit.statemap["needs-review-translation"]
        if i == 1 or not coded(i):
            assert unit.target == expected[i]
        else:  # the codes as their native text (translate-toolkit's reading): <b>, </b>, {0}
            bare = re.sub(r"</?g\d+>|<x\d+/>", "", expected[i])
            if suffix == ".tmx":
                assert sorted(re.findall(r"</?b>|\{0\}", unit.target)) == ["</b>", "<b>", "{0}"]
                assert re.sub(r"</?b>|\{0\}", "", unit.target) == bare
            else:
                target = unit.xmlelement.find(".//{*}target")
                assert sorted(c.tag.split("}")[1] for c in target.iter() if c is not target) == (
                    codes
                )
                assert "".join(target.itertext()) == bare
    if suffix == ".tmx":
        assert b'<prop type="x-Origin">MachineTranslation</prop>' in out
    # The document's languages decide: another target is refused, `auto` takes the file's.
    r = httpx.post(
        server.url + "/translate_file",
        data={"source": "auto", "target": "fr"},
        files={"file": (path.name, path.read_bytes())},
        timeout=120,
    )
    assert r.status_code == 400, r.text
    if suffix != ".tmx":
        lang = "en" if suffix == ".xlf" else "en-US"
        assert r.json()["error"] == f"{path.name}: its target language is {lang}, not fr"
    else:
        assert "no model translates 'de' into 'fr'" in r.json()["error"]
