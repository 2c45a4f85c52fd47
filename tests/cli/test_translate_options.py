"""`mt translate` with structured input and output, target prefixes, sampling and
no-repeat-ngram, through the real command line on a model trained on Multi30k."""

from __future__ import annotations

import gzip
import json

import pytest

N = 40


@pytest.fixture(scope="module")
def german(multi30k_dir) -> list[str]:
    with gzip.open(multi30k_dir / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        return [next(f).strip() for _ in range(N)]


@pytest.fixture(scope="module")
def english(multi30k_dir) -> list[str]:
    with gzip.open(multi30k_dir / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        return [next(f).strip() for _ in range(N)]


def strict_json(line: str):
    def refuse(name):
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(line, parse_constant=refuse)


def test_jsonl_in_and_out_one_object_per_line(tiny_run, mt_cli, german):
    lines = [json.dumps({"src": s}, ensure_ascii=False) for s in german[:10]]
    lines.insert(3, "")  # an empty line stays one (empty) output line
    ckpt = tiny_run / "last.pt"
    result = mt_cli(
        "translate", ckpt, "--input-format", "jsonl", "--output-format", "jsonl",
        "--nbest", "3", "--alignment", "--device", "cpu", stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    assert result.rc == 0, result.err
    records = [strict_json(x) for x in result.out.splitlines()]
    assert len(records) == 11
    assert records[3]["translation"] == "" and records[3]["tokens"] == []
    plain = mt_cli("translate", ckpt, "--device", "cpu", stdin="\n".join(german[:10]) + "\n")
    texts = [r["translation"] for i, r in enumerate(records) if i != 3]
    assert texts == plain.out.splitlines()  # the same search as plain text
    for r in records[:3] + records[4:]:
        assert len(r["nbest"]) == 3
        scores = [h["score"] for h in r["nbest"]]
        assert scores == sorted(scores, reverse=True) and r["score"] == scores[0]
        assert r["nbest"][0]["translation"] == r["translation"]
        assert len(r["alignment"]) == len(r["tokens"]) > 0
        assert "".join(r["tokens"]).replace("\u2581", " ").strip() == r["translation"]


def test_greedy_jsonl_has_scores(tiny_run, mt_cli, german):
    result = mt_cli(
        "translate", tiny_run / "last.pt", "--greedy", "--output-format", "jsonl",
        "--device", "cpu", stdin="\n".join(german[:5]) + "\n",
    )  # fmt: skip
    assert result.rc == 0, result.err
    for r in map(strict_json, result.out.splitlines()):
        assert r["score"] is not None and r["score"] < 0


@pytest.mark.parametrize("search", [["--greedy"], ["--beam", "4"]])
def test_the_output_continues_the_prefix(tiny_run, mt_cli, german, english, search):
    # The reference's first two words: a start the model would often not choose itself.
    prefixes = [" ".join(e.split()[:2]) for e in english]
    lines = [json.dumps({"src": s, "prefix": p}) for s, p in zip(german, prefixes)]
    result = mt_cli(
        "translate", tiny_run / "last.pt", "--input-format", "jsonl", "--device", "cpu",
        *search, stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    assert result.rc == 0, result.err
    out = result.out.splitlines()
    assert len(out) == N
    starts = sum(o.startswith(p) for o, p in zip(out, prefixes))
    assert starts >= N - 2, list(zip(prefixes, out))  # sentencepiece may renormalise a few
    assert sum(len(o) > len(p) + 1 for o, p in zip(out, prefixes)) >= N * 0.9


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("{not json", ["<stdin>:2", "not a JSON object"]),
        ('["a list"]', ["<stdin>:2", "expected a JSON object"]),
        ('{"text": "x"}', ["<stdin>:2", "unknown key 'text'"]),
        ('{"src": 3}', ["<stdin>:2", "'src' must be a string"]),
        ('{"src": "x", "constraints": "y"}', ["<stdin>:2", "'constraints'"]),
    ],
)
def test_a_bad_jsonl_line_is_one_error_line(tiny_run, mt_cli, line, words):
    stdin = '{"src": "Ein Hund."}\n' + line + "\n"
    result = mt_cli(
        "translate", tiny_run / "last.pt", "--input-format", "jsonl", "--device", "cpu",
        stdin=stdin,
    )  # fmt: skip
    assert result.rc == 2
    err = result.err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in result.err
    for w in words:
        assert w in err[0]


@pytest.mark.slow
def test_sampling_is_reproducible_and_varied(tiny_run, mt_cli, german):
    stdin = "\n".join(german[:20]) + "\n"
    ckpt = tiny_run / "last.pt"

    def draw(*opts):
        result = mt_cli("translate", ckpt, "--device", "cpu", "--sample", *opts, stdin=stdin)
        assert result.rc == 0, result.err
        out = result.out.splitlines()
        assert len(out) == 20
        return out

    a = draw("--seed", "5", "--temperature", "1.5")
    assert a == draw("--seed", "5", "--temperature", "1.5")
    b = draw("--seed", "6", "--temperature", "1.5")
    assert sum(x != y for x, y in zip(a, b)) >= 10
    greedy = mt_cli("translate", ckpt, "--device", "cpu", "--greedy", stdin=stdin)
    assert draw("--topk", "1") == greedy.out.splitlines()


def test_sampling_options_need_sample(tiny_run, mt_cli):
    for opts in (["--topk", "5"], ["--sample", "--beam", "4"], ["--sample", "--nbest", "2"]):
        result = mt_cli("translate", tiny_run / "last.pt", *opts, stdin="Ein Hund.\n")
        assert result.rc == 2 and len(result.err.strip().splitlines()) == 1, result.err


def test_no_repeat_ngram_through_the_cli(tiny_run, mt_cli, german):
    result = mt_cli(
        "translate", tiny_run / "last.pt", "--no-repeat-ngram", "2", "--device", "cpu",
        "--output-format", "jsonl", stdin="\n".join(german) + "\n",
    )  # fmt: skip
    assert result.rc == 0, result.err
    for r in map(strict_json, result.out.splitlines()):
        toks = r["tokens"]
        pairs = list(zip(toks, toks[1:]))
        assert len(pairs) == len(set(pairs)), toks


def test_constraints_appear_in_every_output(tiny_run, mt_cli, german, english):
    """One or two reference words per sentence (the longest ones) must be in the output."""
    terms = [sorted(e.rstrip(".").split(), key=len)[-1 - i % 2 :] for i, e in enumerate(english)]
    lines = [json.dumps({"src": s, "constraints": t}) for s, t in zip(german, terms)]
    result = mt_cli(
        "translate", tiny_run / "last.pt", "--input-format", "jsonl", "--device", "cpu",
        "--beam", "4", stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    assert result.rc == 0, result.err
    out = result.out.splitlines()
    assert len(out) == N
    for o, t in zip(out, terms):
        for word in t:
            assert f" {word}" in f" {o}", (word, o)


@pytest.mark.parametrize(
    ("record", "opts", "words"),
    [
        ({"src": "Ein Hund.", "constraints": ["dog"]}, ["--greedy"], "beam search"),
        ({"src": "Ein Hund.", "constraints": ["dog"], "prefix": "A"}, [], "prefix"),
        ({"src": "Ein Hund.", "constraints": [""]}, [], "empty"),
    ],
)
def test_constraints_misused_are_one_error_line(tiny_run, mt_cli, record, opts, words):
    result = mt_cli(
        "translate", tiny_run / "last.pt", "--input-format", "jsonl", "--device", "cpu", *opts,
        stdin=json.dumps(record) + "\n",
    )  # fmt: skip
    assert result.rc == 2, result.err
    err = result.err.strip().splitlines()
    assert len(err) == 1 and words in err[0], result.err
