"""`mt serve`'s batching worker, in this process: concurrent jobs that split their items into
sentences and jobs that do not share one translator call, whose split stage does the cutting
and joining (mt.translation.sentences), and each job gets back what it would alone."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from mt.data.corpus import read_lines
from mt.serve.config import ServeConfig
from mt.serve.prometheus import Metrics
from mt.serve.worker import ModelWorker
from mt.translation.requests import Request, Translation
from mt.translation.sentences import split_sentences
from mt.translation.session import DecodeOptions
from mt.translation.translator import Translator


@pytest.fixture(scope="module")
def test_de(multi30k_dir: Path) -> list[str]:
    return [x.strip() for x in read_lines(multi30k_dir / "test_2016_flickr.de.gz")]


@pytest.fixture(scope="module")
def worker(tiny_run: Path):
    worker = ModelWorker("tiny", ServeConfig(models={"tiny": [tiny_run / "best.pt"]}), Metrics())
    worker.start()
    deadline = time.monotonic() + 120
    while not worker.ready and worker.error is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker.session is not None, worker.error
    yield worker
    worker.stop()


def test_each_model_has_its_queue_gauge_before_any_request(tiny_run: Path):
    """/metrics shows every model's queue at 0 from the start, so a scraper (or a test waiting
    for a depth) reads a number, not a missing series."""
    metrics = Metrics()
    config = ServeConfig(models={"a": [tiny_run / "best.pt"], "b": [tiny_run / "best.pt"]})
    for name in config.models:
        ModelWorker(name, config, metrics)
    text = metrics.text()
    assert metrics.queue_depth == {"a": 0, "b": 0}
    assert 'mt_queue_sentences{model="a"} 0' in text and 'mt_queue_sentences{model="b"} 0' in text


def pooled(worker: ModelWorker, jobs: list[tuple[list[Request], bool]]) -> list[list[Translation]]:
    """The jobs' answers, all queued while the worker is busy, so they go in one pass."""
    busy, queued = threading.Event(), threading.Event()

    async def main() -> list[list[Translation]]:
        def hold(session):  # noqa: ANN001, ANN202 - runs in the worker's thread
            busy.set()
            queued.wait(60)

        first = asyncio.ensure_future(worker.run(hold))
        await asyncio.to_thread(busy.wait, 60)
        answers = [
            asyncio.ensure_future(worker.translate(reqs, DecodeOptions(), False, split))
            for reqs, split in jobs
        ]
        await asyncio.sleep(0)  # each future has queued its job
        queued.set()
        await first
        return list(await asyncio.gather(*answers))

    return asyncio.run(main())


def test_split_and_whole_jobs_share_one_translate_call(worker, test_de, monkeypatch):
    calls: list[list[Request]] = []
    rounds: list[list[str]] = []
    translate, search = Translator.translate, Translator._search_requests

    def counted(self, requests):  # noqa: ANN001, ANN202
        calls.append(list(requests))
        return translate(self, requests)

    def searched(self, requests, alignment, protect):  # noqa: ANN001, ANN202
        rounds.append([r.src for r in requests])
        return search(self, requests, alignment, protect)

    monkeypatch.setattr(Translator, "translate", counted)
    monkeypatch.setattr(Translator, "_search_requests", searched)
    paragraph = " ".join(test_de[:3]) + "\n\n" + " ".join(test_de[3:5]) + "\n"
    long = " ".join(test_de[100:180]).replace(".", ",")  # one sentence over the source limit
    jobs = [
        ([Request(paragraph), Request(test_de[5])], True),
        ([Request(test_de[6])], False),
        ([Request(long)], True),
    ]
    got = pooled(worker, jobs)
    # One call, the requests as the jobs sent them, a plan saying which to split.
    assert len(calls) == 1
    assert [r.src for r in calls[0]] == [paragraph, test_de[5], test_de[6], long]
    assert [r.plan.split for r in calls[0]] == ["de", "de", None, "de"]
    # One round of search: the sentences of every job together, none over the source limit.
    assert len(rounds) == 1
    split = split_sentences(paragraph, "de")
    assert rounds[0][: len(split.sentences) + 2] == [*split.sentences, test_de[5], test_de[6]]
    translator = worker.session.translator()
    sizes = [len(x) for x in translator.tokenizer.encode_src(rounds[0])]
    assert max(sizes) < translator.max_src and len(rounds[0]) >= len(split.sentences) + 4
    # Each job's answers as each item translated alone (newlines and paragraphs kept).
    monkeypatch.undo()
    (para, fifth), (sixth,), (cut,) = got
    alone = pooled(worker, [([Request(x)], False) for x in [*split.sentences, *test_de[5:7]]])
    texts = [a[0].text for a in alone]
    assert para.text == split.join(texts[: len(split.sentences)]) and "\n\n" in para.text
    assert para.text.endswith("\n") and para.sentences == len(split.sentences)
    for mine, ref in ((fifth, alone[-2][0]), (sixth, alone[-1][0])):
        assert (mine.text, mine.texts, mine.flags) == (ref.text, ref.texts, ref.flags)
        assert mine.confidence == pytest.approx(ref.confidence, abs=1e-3)
    assert cut.text and cut.sentences == len(rounds[0]) - len(split.sentences) - 2


def test_jobs_of_different_languages_share_one_translate_call(multi_run, multi30k_dir, monkeypatch):
    """A multilingual model: each item split in its own source language, into its own target."""
    worker = ModelWorker("multi", ServeConfig(models={"multi": [multi_run / "best.pt"]}), Metrics())
    worker.start()
    try:
        deadline = time.monotonic() + 120
        while not worker.ready and worker.error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert worker.session is not None, worker.error
        de = [x.strip() for x in read_lines(multi30k_dir / "test_2016_flickr.de.gz")[:4]]
        en = [x.strip() for x in read_lines(multi30k_dir / "test_2016_flickr.en.gz")[:4]]
        german, english = " ".join(de[:3]), "  ".join(en[:3])
        calls: list[list[Request]] = []
        translate = Translator.translate

        def counted(self, requests):  # noqa: ANN001, ANN202
            calls.append(list(requests))
            return translate(self, requests)

        monkeypatch.setattr(Translator, "translate", counted)
        jobs = [
            ([Request(german, to="en", frm="de")], True),
            ([Request(english, to="fr", frm="en")], True),
            ([Request(en[3], to="de", frm="en")], False),
        ]
        (para_en,), (para_fr,), (whole,) = pooled(worker, jobs)
        assert len(calls) == 1 and len(calls[0]) == 3
        monkeypatch.undo()
        for text, src, to, frm in ((para_en, german, "en", "de"), (para_fr, english, "fr", "en")):
            split = split_sentences(src, frm)
            assert len(split.sentences) == 3 and text.sentences == 3
            alone = pooled(worker, [([Request(x, to=to, frm=frm)], False) for x in split.sentences])
            assert text.text == split.join([a[0].text for a in alone])
        [[ref]] = pooled(worker, [([Request(en[3], to="de", frm="en")], False)])
        assert (whole.text, whole.flags) == (ref.text, ref.flags)
    finally:
        worker.stop()


def test_a_document_goes_in_slices_between_other_requests(worker, test_de):
    """A request sent while a document is translated is answered long before the document
    is done: the document goes a slice at a time, the request in the next pass. Each text of
    the document is translated as it would be alone, and its progress is in the metrics."""
    texts = [Request(x) for x in test_de[:400]]
    seen: dict[str, object] = {}

    async def main() -> list[Translation]:
        doc = asyncio.ensure_future(worker.translate_document("notes.txt", texts, []))
        deadline = time.monotonic() + 60
        while not worker.metrics.documents and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        [(ident, (file, total, _))] = worker.metrics.documents.items()
        assert (file, total) == ("notes.txt", 400)
        [one] = await worker.translate([Request(test_de[500])], DecodeOptions(), False, True)
        seen.update(one=one, doc_done=doc.done(), progress=worker.metrics.documents[ident][2])
        done, fragments, units = await doc
        assert fragments == units == [] and not worker.metrics.documents  # gone from /metrics
        return done

    done = asyncio.run(main())
    assert seen["doc_done"] is False and 0 <= seen["progress"] < 400
    assert seen["one"].text
    assert len(done) == 400 and worker.metrics.document_texts >= 400
    alone = pooled(worker, [(texts[:40], True)])[0]
    assert [t.text for t in done[:40]] == [t.text for t in alone]
