"""The guarantee whatever the model: with protection, no path writes a span its source lacks.

The model here is trained to write spans of its own (every target holds `%s`, `<b>...</b>`,
`&amp;`, `{0}` and `$HOME`, which no source holds), so without protection its output is full
of them; with protection (`mt.decode.bans`), every path keeps exactly the source's spans.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import httpx
import pytest
import torch
import yaml
from serve_helpers import start_server

from mt.checkpoint import load_model
from mt.decode.bans import Bans, SpanRule, step_mask
from mt.decode.protect import exact
from mt.spans import find_spans

WORDS = ["ka", "lo", "mi", "nu", "pe", "ri", "so", "tu", "va", "ze"]


def _target(words: list[str]) -> str:
    return f"%s {' '.join(words)} <b>{words[0]}</b> &amp; {{0}} $HOME"


@pytest.fixture(scope="module")
def spanful_run(tmp_path_factory: pytest.TempPathFactory, mt_cli) -> Path:
    """A 1+1-layer model trained on targets full of spans that their sources lack."""
    root = tmp_path_factory.mktemp("spanful")
    rng = random.Random(0)
    for name, n in (("train", 600), ("val", 20)):
        rows = [[rng.choice(WORDS) for _ in range(rng.randint(2, 6))] for _ in range(n)]
        (root / f"{name}.src").write_text("".join(" ".join(r) + "\n" for r in rows))
        (root / f"{name}.tgt").write_text("".join(_target(r) + "\n" for r in rows))
    cfg = {
        "data": {"root": str(root), "src_lang": "src", "tgt_lang": "tgt", "max_len_ratio": 20.0},
        "tokenizer": {"vocab_size": 60},
        "model": {"d_model": 32, "n_heads": 2, "d_ff": 64, "encoder_layers": 1,
                  "decoder_layers": 1, "dropout": 0.0},  # fmt: skip
        "train": {"device": "cpu", "precision": "fp32", "threads": 1, "seed": 7,
                  "max_tokens": 1024, "warmup": 20, "lr": 0.01, "max_steps": 150,
                  "log_every": 50, "eval_every": 150, "eval_bleu": False, "keep_last": 0},
        "decode": {"beam": 4},
    }  # fmt: skip
    (root / "config.yaml").write_text(yaml.safe_dump(cfg))
    r = mt_cli("train", root / "config.yaml", "--run-dir", root / "run")
    assert r.rc == 0, r.err
    return root / "run"


# `%s`, `$HOME` and `<b>`: characters the model writes, so those lines keep their spans in the
# text, the model allowed to write them (once each); the others are lifted out and placed.
LINES = ["ka lo mi", "nu %d pe", "ri so <i>tu</i> va", "ze ka {1} lo 50 %", "mi nu",
         "ka %s lo", "mi $HOME nu %s", "so &amp; <b> tu"]  # fmt: skip


def _spans(text: str) -> Counter:
    return Counter(s.text for s in find_spans(text))


def _check(sources: list[str], outputs: list[str]) -> None:
    assert len(outputs) == len(sources)
    for src, out in zip(sources, outputs):
        assert _spans(out) == _spans(src), (src, out)


def test_without_protection_the_model_writes_spans(spanful_run, mt_cli) -> None:
    r = mt_cli("translate", spanful_run / "best.pt", "--no-protect", "--greedy",
               stdin="ka lo mi\nmi nu\n")  # fmt: skip
    assert r.rc == 0, r.err
    extra = [_spans(x) for x in r.out.splitlines()]
    assert all(len(e) >= 3 for e in extra), r.out  # the test below would catch them


@pytest.mark.parametrize(
    "flags",
    [[], ["--greedy"], ["--sample", "--seed", "3"], ["--no-repeat-ngram", "3"]],
    ids=["beam", "greedy", "sample", "no-repeat"],
)
def test_protected_paths_write_only_the_sources_spans(spanful_run, mt_cli, flags) -> None:
    r = mt_cli("translate", spanful_run / "best.pt", *flags, stdin="".join(x + "\n" for x in LINES))
    assert r.rc == 0, r.err
    _check(LINES, r.out.splitlines())


@pytest.mark.slow  # ~10-30 s; each feature's own default test covers it alone
def test_nbest_ensemble_html_constraints_prefixes(spanful_run, mt_cli) -> None:
    ckpt = spanful_run / "best.pt"
    stdin = "".join(x + "\n" for x in LINES)
    r = mt_cli("translate", ckpt, "--nbest", "3", stdin=stdin)
    assert r.rc == 0, r.err
    _check([x for x in LINES for _ in range(3)], [x.split(" ||| ")[1] for x in r.out.splitlines()])
    r = mt_cli("translate", ckpt, ckpt, stdin=stdin)  # an ensemble
    assert r.rc == 0, r.err
    _check(LINES, r.out.splitlines())
    html = ["ka <b>lo</b> mi", "nu &amp; pe <br/> ri"]
    r = mt_cli("translate", ckpt, "--input-format", "html", stdin="".join(x + "\n" for x in html))
    assert r.rc == 0, r.err
    _check(html, r.out.splitlines())
    items = [
        {"src": "ka lo", "constraints": ["mi"]},
        {"src": "nu %d pe", "prefix": "nu"},
        {"src": "ri so", "prefix": "ri"},
        {"src": "so {1} tu", "constraints": ["tu"]},
    ]
    r = mt_cli("translate", ckpt, "--input-format", "jsonl",
               stdin="".join(json.dumps(x) + "\n" for x in items))  # fmt: skip
    assert r.rc == 0, r.err
    outs = r.out.splitlines()
    _check([x["src"] for x in items], outs)
    assert "mi" in outs[0].split() and outs[1].startswith("nu")


def test_serve_writes_only_the_sources_spans(spanful_run, tmp_path) -> None:
    server = start_server(spanful_run / "best.pt", log=tmp_path / "serve.log")
    try:
        body = {"items": [{"src": x} for x in LINES]}
        r = httpx.post(server.url + "/v1/translate", json=body, timeout=120)
        assert r.status_code == 200, r.text
        _check(LINES, [x["translation"] for x in r.json()["items"]])
    finally:
        assert server.stop() == 0


def test_exact_drops_extra_spans_and_appends_missing_ones() -> None:
    src = find_spans("a %s b %d")
    assert exact("x %s %s y {0}", src, ()) == "x %s y %d"
    assert exact("%d then %s", src, ()) == "%d then %s"
    assert exact("{0}", find_spans("{0}"), ["c-format"]) is None  # no span there for C


def test_the_mask_bans_completions_not_starts(spanful_run) -> None:
    """`%` and `<` alone stay writable (`50 %`, `a < b`); what completes a span is banned;
    a fixed vocabulary mask combines with the rule."""
    tok = load_model(spanful_run / "best.pt").tokenizer
    rule = SpanRule(tok, torch.device("cpu"))
    ids = {t: v for v, t in enumerate(rule.texts)}

    def encode(text: str) -> list[int]:
        return tok.encode_tgt([text])[0]

    history = torch.tensor([encode("ka %")])
    banned = step_mask(Bans(spans=rule), history, torch.zeros(1, dtype=torch.long))
    assert banned is not None
    row = banned if banned.dim() == 1 else banned[0]
    for v, text in enumerate(rule.texts):
        if text[:1] in ("s", "d"):  # `%s`, `%d`, `%s.`; not `%so`, which is no span
            assert bool(row[v]) == (len(text) == 1 or not text[1].isalpha()), text
    assert not row[ids[" ka"]] and not row[tok.tgt.piece_to_id("▁lo")]
    fixed = torch.zeros(len(rule.texts), dtype=torch.bool)
    fixed[ids[" ka"]] = True
    both = step_mask(Bans(vocab=fixed, spans=rule), history, torch.zeros(1, dtype=torch.long))
    assert both is not None and bool((both.view(-1, len(rule.texts))[0] >= row).all())
    assert bool(both.view(-1, len(rule.texts))[0, ids[" ka"]])
