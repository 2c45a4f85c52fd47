"""`mt serve`'s file route bounded and fair, over real HTTP: zip bombs and XML entity bombs
refused with the server's memory flat, a document's texts counted against limits of their own
and the shared queue, and translated a slice at a time so other requests do not wait for it.

The server pools for a second (`--batch-window-ms 1000`): a lone one-sentence request waits
that long in the queue before its pass, so a test can see it queued and send a slow request
to join it; while the worker searches for that one, a test sees documents queued, refused and
dropped.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from support.bombs import zip_bomb
from support.processes import Server, start_server

from mt.data.corpus import read_lines

MIB = 1 << 20
LIMITS = (
    "--max-chars", "300", "--max-queue", "200", "--max-file-segments", "150",
    "--max-file-chars", "12000", "--max-unzipped-bytes", str(2 * MIB), "--batch-window-ms", "1000",
)  # fmt: skip


@pytest.fixture(scope="module")
def server(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("serve_files")
    srv = start_server(tiny_run / "best.pt", "--device", "cpu", *LIMITS, log=folder / "log")
    yield srv
    assert srv.stop() == 0
    assert "Traceback" not in srv.log.read_text()


@pytest.fixture(scope="module")
def test_de(multi30k_dir: Path) -> list[str]:
    return [x.strip() for x in read_lines(multi30k_dir / "test_2016_flickr.de.gz")]


def upload(server: Server, name: str, data: bytes) -> httpx.Response:
    return httpx.post(
        server.url + "/translate_file",
        data={"source": "de", "target": "en"},
        files={"file": (name, data)},
        timeout=300,
    )


def metric(server: Server, name: str) -> float:
    text = httpx.get(server.url + "/metrics", timeout=30).text
    return float(next(x for x in text.splitlines() if x.startswith(name)).split()[-1])


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def peak_growth_mib(server: Server, send) -> tuple[httpx.Response, float]:  # noqa: ANN001
    """`send()`'s answer, and how far the server's peak RSS rose above its RSS before it
    (the peak reset first where the kernel allows: /proc/PID/clear_refs)."""
    pid = server.proc.pid
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        pass
    before = status_kib(pid, "VmRSS")
    r = send()
    return r, (status_kib(pid, "VmHWM") - before) / 1024


def test_zip_bombs_are_refused_and_the_server_holds_no_more_memory(server):
    upload(server, "warm.txt", b"Ein Hund.\n")  # the route's first call costs its imports
    honest = zip_bomb(300 * MIB)  # 0.3 MB that unzips to 300 MB
    r, grew = peak_growth_mib(server, lambda: upload(server, "bomb.docx", honest))
    assert r.status_code == 413 and r.json()["limit"] == "max_unzipped_bytes", r.text
    assert r.json()["error"] == (
        "bomb.docx: word/document.xml unzips to 314,572,800 bytes; the limit is 2,097,152"
    )
    assert grew < 50, f"RSS rose {grew:.0f} MiB"
    # One that lies about its size (with the CRC of what it declares): read no further.
    liar = zip_bomb(150 * MIB, declare=1000)
    r, grew = peak_growth_mib(server, lambda: upload(server, "liar.docx", liar))
    assert r.status_code == 400 and r.json()["error"].startswith("liar.docx: not a .docx file")
    assert grew < 50, f"RSS rose {grew:.0f} MiB"
    assert httpx.get(server.url + "/health").json() == {"status": "ready"}


def test_a_document_over_its_limits_is_413_naming_them(server, test_de):
    many = "".join(f"{i}. {test_de[i % 100]}\n" for i in range(151)).encode()
    r = upload(server, "many.txt", many)
    assert r.status_code == 413 and r.json()["limit"] == "max_file_segments"
    assert r.json()["error"] == (
        "many.txt: more than 150 texts to translate (lines, paragraphs, cells, subtitles); "
        "the limit is 150"
    )
    pairs = [" ".join(test_de[i : i + 2])[:290] for i in range(0, 300, 2)]
    long = "".join(p + "\n" for p in pairs[:110]).encode()  # under 150 lines, 12,000+ chars
    r = upload(server, "long.txt", long)
    assert r.status_code == 413 and r.json()["limit"] == "max_file_chars", r.text
    one = (" ".join(test_de[:10]) + "\n").encode()  # one line over --max-chars
    r = upload(server, "one.txt", one)
    assert r.status_code == 413 and r.json()["limit"] == "max_chars"
    assert r.json()["error"].startswith("one.txt: a text of ")
    # Blank lines are no texts: a file of them is answered as it came, at no cost.
    r = upload(server, "blank.txt", b"\n \n\n" * 1000)
    assert r.status_code == 200 and httpx.get(r.json()["translatedFileUrl"]).content == (
        b"\n \n\n" * 1000
    )


LAUGHS = '<!ENTITY lol0 "lololololololololololololol">' + "".join(
    f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)
)  # &lol9; is 1,000,000,000 lols once expanded, some 30 GB
LAUGHING_XLIFF = (
    f'<?xml version="1.0"?>\n<!DOCTYPE xliff [{LAUGHS}]>\n<xliff xmlns="urn:oasis:names:tc:'
    'xliff:document:2.0" version="2.0" srcLang="de" trgLang="en"><file id="f"><unit id="u">'
    "<segment><source>&lol9;</source></segment></unit></file></xliff>\n"
)
LAUGHING_TMX = (
    f'<?xml version="1.0"?>\n<!DOCTYPE tmx [{LAUGHS}]>\n<tmx version="1.4"><header '
    'srclang="de" creationtool="t" creationtoolversion="1" segtype="sentence" o-tmf="t" '
    'adminlang="en" datatype="plaintext"/><body><tu><tuv xml:lang="de"><seg>&lol9;</seg></tuv>'
    "</tu></body></tmx>\n"
)


def test_xml_entity_bombs_and_external_entities_are_refused(server, tmp_path):
    """A billion laughs in a segment or in an attribute is a 400 at once, the server's memory
    flat; an external entity (XXE) never reads the file it names."""
    upload(server, "warm.xlf", LAUGHING_XLIFF.replace("&lol9;", "Hund").encode())
    for name, doc in (
        ("laughs.xlf", LAUGHING_XLIFF),
        ("attr.xlf", LAUGHING_XLIFF.replace('<unit id="u">', '<unit id="&lol9;">')),
        ("laughs.tmx", LAUGHING_TMX),
        ("attr.tmx", LAUGHING_TMX.replace("<tu>", '<tu tuid="&lol9;">')),
    ):
        start = time.monotonic()
        r, grew = peak_growth_mib(server, lambda n=name, d=doc: upload(server, n, d.encode()))
        assert r.status_code == 400, r.text
        assert r.json()["error"].startswith(f"{name}")
        assert time.monotonic() - start < 5 and grew < 50, f"RSS rose {grew:.0f} MiB"
    secret = tmp_path / "secret.txt"
    secret.write_text("Geheimnis")
    xxe = (
        f'<?xml version="1.0"?>\n<!DOCTYPE tmx [<!ENTITY s SYSTEM "file://{secret}">]>\n'
        '<tmx version="1.4"><header srclang="de" creationtool="t" creationtoolversion="1" '
        'segtype="sentence" o-tmf="t" adminlang="en" datatype="plaintext"/><body><tu>'
        '<tuv xml:lang="de"><seg>&s;</seg></tuv></tu></body></tmx>'
    )
    r = upload(server, "xxe.tmx", xxe.encode())
    assert r.status_code == 400 and "Geheimnis" not in r.text
    assert r.json()["error"].startswith("xxe.tmx:3: entity &s; inside a segment"), r.text
    r = upload(server, "xxe2.tmx", xxe.replace("<tu>", '<tu tuid="&s;">').encode())
    assert r.status_code == 400 and "Geheimnis" not in r.text
    assert r.json()["error"] == (
        "xxe2.tmx:3: not well-formed XML (Attribute references external entity 's')"
    )
    assert httpx.get(server.url + "/health").json() == {"status": "ready"}


def test_a_cat_file_over_the_limits_is_413(server, test_de, tmp_path):
    from support.cat_files import write_tmx, write_xliff1

    many = write_tmx(tmp_path / "many.tmx", [(test_de[i % 100], None) for i in range(151)])
    r = upload(server, "many.tmx", many.read_bytes())
    assert r.status_code == 413 and r.json()["limit"] == "max_file_segments", r.text
    long = [(" ".join(test_de[i : i + 2])[:290], None) for i in range(0, 220, 2)]
    r = upload(server, "long.xlf", write_xliff1(tmp_path / "long.xlf", long).read_bytes())
    assert r.status_code == 413 and r.json()["limit"] == "max_file_chars", r.text
    # Translated units count: 149 kept and one to fill is one segment.
    done = [(test_de[i], "x") for i in range(149)] + [(test_de[0], None)]
    r = upload(server, "done.tmx", write_tmx(tmp_path / "d.tmx", done, codes=False).read_bytes())
    assert r.status_code == 200, r.text
    broken = write_tmx(tmp_path / "b.tmx", done[:2]).read_bytes()[:-40]
    r = upload(server, "b.tmx", broken)
    assert r.status_code == 400 and r.json()["error"].startswith("b.tmx:"), r.text
    assert "not well-formed XML" in r.json()["error"]


def send(name: str, call, answers: dict) -> threading.Thread:  # noqa: ANN001
    """`call()` in a thread; its response and the time it came into `answers[name]`."""

    def run() -> None:
        answers[name] = (call(), time.monotonic())

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def occupy(server: Server, test_de: list[str], answers: dict) -> list[threading.Thread]:
    """Keep the worker busy for seconds: a one-sentence request waits out its window in the
    queue, a slow one (100 long sentences, beam 32) joins its pass, and once the first is
    answered the worker is searching for the slow one, whatever the machine's load."""
    threads = [send("held", lambda: translate(server, test_de[999:1000]), answers)]
    wait_for(server, "mt_queue_sentences{", lambda n: n == 1)
    slow = [{"src": " ".join(test_de[3 * i : 3 * i + 3])[:290]} for i in range(100)]
    body = {"items": slow, "options": {"beam": 32}, "split_sentences": False}
    call = lambda: httpx.post(server.url + "/v1/translate", json=body, timeout=300)  # noqa: E731
    threads.append(send("slow", call, answers))
    deadline = time.monotonic() + 60
    while "held" not in answers:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert "slow" not in answers
    return threads


def translate(server: Server, sentences: list[str]) -> httpx.Response:
    items = [{"src": x} for x in sentences]
    return httpx.post(server.url + "/v1/translate", json={"items": items}, timeout=300)


def wait_for(server: Server, name: str, ok, timeout: float = 30) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not ok(metric(server, name)):
        assert time.monotonic() < deadline, f"{name}: {metric(server, name)}"
        time.sleep(0.01)


def test_documents_share_the_queue_and_never_keep_a_request_waiting(server, test_de):
    """While the worker is busy: a document of 150 texts is queued, a second one does not fit
    the queue (503) while a request of 60 sentences still does, and is answered before the
    document is done; the document's texts are translated as they are alone."""
    answers: dict[str, tuple[httpx.Response, float]] = {}
    threads = occupy(server, test_de, answers)
    lines = test_de[200:350]
    doc = ("\n".join(lines) + "\n").encode()
    threads.append(send("doc", lambda: upload(server, "doc.txt", doc), answers))
    wait_for(server, "mt_queue_sentences{", lambda n: n == 150)
    assert metric(server, "mt_documents_in_progress{") == 1
    assert metric(server, "mt_document_texts{") == 150  # its state="total" line
    full = upload(server, "second.txt", doc)
    assert full.status_code == 503 and full.json()["limit"] == "max_queue", full.text
    assert full.headers["retry-after"] == "1"
    threads.append(send("request", lambda: translate(server, test_de[400:460]), answers))
    for thread in threads:
        thread.join(300)
    assert {name: r.status_code for name, (r, _) in answers.items()} == {
        "held": 200, "slow": 200, "doc": 200, "request": 200,
    }  # fmt: skip
    assert answers["request"][1] < answers["doc"][1]
    out = httpx.get(answers["doc"][0].json()["translatedFileUrl"]).text.splitlines()
    alone = translate(server, lines[:20]).json()["items"]
    assert out[:20] == [t["translation"] for t in alone]
    assert metric(server, "mt_documents_in_progress{") == 0


def test_a_client_that_leaves_drops_its_document(server, test_de):
    dropped = metric(server, "mt_dropped_sentences_total ")
    translated = metric(server, "mt_document_texts_total ")
    answers: dict[str, tuple[httpx.Response, float]] = {}
    threads = occupy(server, test_de, answers)
    doc = ("\n".join(test_de[500:650]) + "\n").encode()
    built = httpx.Request(
        "POST", server.url + "/translate_file", data={"source": "de", "target": "en"},
        files={"file": ("gone.txt", doc)},
    )  # fmt: skip
    body = built.read()
    head = f"POST /translate_file HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    head += f"Content-Type: {built.headers['content-type']}\r\n\r\n"
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(head.encode() + body)
        wait_for(server, "mt_documents_in_progress{", lambda n: n == 1)
    wait_for(server, "mt_documents_in_progress{", lambda n: n == 0, timeout=60)
    for thread in threads:
        thread.join(300)
    assert metric(server, "mt_dropped_sentences_total ") == dropped + 150
    assert metric(server, "mt_document_texts_total ") == translated


def test_the_file_limits_are_settings_of_the_server(tiny_run, mt_cli):
    result = mt_cli("serve", tiny_run / "best.pt", "--max-file-chars", "0")
    assert result.rc == 2 and result.err == "mt: error: --max-file-chars must be >= 1\n"
