"""Exports of a multilingual checkpoint translate each trained direction as `mt translate` does.

The tiny four-direction model of conftest.py (`multi_run`, trained with the language token as
the decoder's first input) is exported through the real command line to CTranslate2 and HF
Marian, and asked for each language the way `mt export` prints and `languages.json` records:
CTranslate2's `target_prefix` from a model with no decoder start token, Marian's
`decoder_start_token_id`. The same weights labelled `data.lang_token: source` check the other
placement's conventions (`<2fr>` as the first source token; Marian's `>>fr<<`): that model was
not trained so, so its output is poor, but an export must still compute exactly what mt
computes. Greedy search on test_2016_flickr lines of each direction's source language (12 in
the default suite, 60 with `-m slow`), with mt's target-language guard carried (suppress lists)
against `mt translate`, and (slow) without it against `mt translate --no-target-vocab`; the
`source` placement with `-m slow` only. Engines take one length limit per batch where mt has one per
sentence, so lines are decoded in groups of equal limit.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from support.tasks import MULTI_PAIRS

LINES = 60  # per direction
PAIRS = [tuple(p.split("-")) for p in MULTI_PAIRS]


@pytest.fixture(scope="module")
def sources(multi30k_dir: Path) -> dict[str, list[str]]:
    """The first LINES test_2016_flickr lines of each source language."""
    out = {}
    for lang in {s for s, _ in PAIRS}:
        with gzip.open(multi30k_dir / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
            out[lang] = [next(f).strip() for _ in range(LINES)]
    return out


@pytest.fixture(scope="module", params=["target", pytest.param("source", marks=pytest.mark.slow)])
def checkpoint(request, multi_run: Path, tmp_path_factory) -> Path:
    """multi_run's best.pt, or the same weights with the language token before the source."""
    if request.param == "target":
        return multi_run / "best.pt"
    data = torch.load(multi_run / "best.pt", weights_only=True)
    data["tokenizer"]["languages"]["placement"] = "source"
    data["config"]["data"]["lang_token"] = "source"
    path = tmp_path_factory.mktemp("source_placement") / "best.pt"
    torch.save(data, path)
    return path


@pytest.fixture(scope="module")
def loaded(checkpoint):
    from mt.checkpoint import load_model

    return load_model(checkpoint)


@pytest.fixture(scope="module")
def mt_greedy(checkpoint, mt_cli, sources, tmp_path_factory) -> Callable[[bool, int], dict]:
    """(guard, n) -> direction -> `mt translate --greedy` of its first n lines (`--no-target-vocab`
    without the guard): one JSONL file of every direction (`"to"` per line), as a user would
    mix them; each run once."""
    runs: dict[tuple[bool, int], dict] = {}

    def run(guard: bool, n: int) -> dict:
        if (guard, n) not in runs:
            rows = [(s, t, line) for s, t in PAIRS for line in sources[s][:n]]
            path = tmp_path_factory.mktemp("mixed") / "in.jsonl"
            text = "".join(json.dumps({"src": x, "from": s, "to": t}) + "\n" for s, t, x in rows)
            path.write_text(text, encoding="utf-8")
            args = ["translate", checkpoint, "--greedy", "--input", path, "--input-format", "jsonl"]
            result = mt_cli(*args, *([] if guard else ["--no-target-vocab"]))
            assert result.rc == 0, result.err
            lines = result.out.splitlines()
            assert len(lines) == len(rows)
            runs[guard, n] = defaultdict(list)
            for (s, t, _), got in zip(rows, lines):
                runs[guard, n][s, t].append(got)
        return runs[guard, n]

    return run


@pytest.fixture(scope="module")
def exported(checkpoint, mt_cli, tmp_path_factory) -> dict[str, tuple[Path, str]]:
    """engine -> (its folder, what `mt export` printed)."""
    pytest.importorskip("ctranslate2", reason="needs the [export] extra (ctranslate2)")
    pytest.importorskip("transformers", reason="needs the [export] extra (transformers)")
    folder = tmp_path_factory.mktemp("export")
    out = {}
    for engine in ("ctranslate2", "marian"):
        result = mt_cli("export", checkpoint, folder / engine, "--to", engine)
        assert result.rc == 0, result.err
        out[engine] = (folder / engine, result.err)
    return out


def _in_groups(
    lengths: list[int], limit_of: Callable[[int], int], decode: Callable[[list[int], int], list]
) -> list:
    """decode(rows, limit) run once per group of lines whose mt length limit is the same."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, n in enumerate(lengths):
        groups[limit_of(n)].append(i)
    out: list = [None] * len(lengths)
    for limit, rows in groups.items():
        for r, got in zip(rows, decode(rows, limit)):
            out[r] = got
    return out


def _limit_of(loaded) -> Callable[[int], int]:
    """mt's output limit for a source of n pieces: it counts EOS, and the language token when
    it goes before the source."""
    d, mark = loaded.cfg.decode, int(loaded.tokenizer.languages.placement == "source")
    return lambda n: int(d.max_len_a * (n + 1 + mark) + d.max_len_b)


def _assert_same(mt_out: dict, theirs: dict, what: str) -> None:
    for pair in PAIRS:
        same = sum(x == y for x, y in zip(theirs[pair], mt_out[pair], strict=True))
        assert same == len(mt_out[pair]), f"{what} {pair}: {same}/{len(mt_out[pair])} equal"


def _card(folder: Path) -> dict:
    return json.loads((folder / "languages.json").read_text(encoding="utf-8"))


# guard on at 12 lines in the default suite; 60 lines, and the guard off, with -m slow
CASES = [
    pytest.param(True, 12, id="guard-12"),
    pytest.param(True, LINES, id="guard-60", marks=pytest.mark.slow),
    pytest.param(False, LINES, id="no-guard-60", marks=pytest.mark.slow),
]


def _ct2_direction(translator, tok, lines: list[str], ask: dict, guard: bool, limit_of) -> list:
    """Greedy CTranslate2 output for `lines`, asked for a language as languages.json says."""
    pieces = [ask.get("source_prefix", []) + tok.src.encode(x, out_type=str) for x in lines]
    mark = len(ask.get("source_prefix", []))

    def decode(rows: list[int], limit: int) -> list[str]:
        results = translator.translate_batch(
            [pieces[r] for r in rows],
            target_prefix=[ask["target_prefix"]] * len(rows) if "target_prefix" in ask else None,
            beam_size=1,
            max_decoding_length=limit,
            suppress_sequences=ask["suppress_sequences"] if guard else None,
        )
        hyps = [r.hypotheses[0] for r in results]
        return [tok.decode_tgt([tok.tgt.piece_to_id(p) for p in h]) for h in hyps]

    return _in_groups([len(p) - mark for p in pieces], limit_of, decode)


@pytest.mark.parametrize("guard, n", CASES)
def test_ctranslate2_translates_each_direction_as_mt(
    exported, loaded, sources, mt_greedy, guard, n
):
    import ctranslate2

    folder, _ = exported["ctranslate2"]
    card = _card(folder)
    translator = ctranslate2.Translator(str(folder), device="cpu", intra_threads=1)
    theirs = {
        (s, t): _ct2_direction(
            translator,
            loaded.tokenizer,
            sources[s][:n],
            card["languages"][t],
            guard,
            _limit_of(loaded),
        )
        for s, t in PAIRS
    }
    _assert_same(mt_greedy(guard, n), theirs, f"ctranslate2 {card['placement']} guard={guard}")


def _marian_direction(hf, ids: list[list[int]], ask: dict, guard: bool, mark: int, limit_of):
    """Greedy HF Marian output (mt's target ids) for source `ids`, asked as languages.json says."""
    from mt.batching import pad
    from mt.tokenizer import EOS, PAD

    extra = {}
    if "decoder_start_token_id" in ask:
        extra["decoder_start_token_id"] = ask["decoder_start_token_id"]
    if guard:
        extra["suppress_tokens"] = ask["suppress_tokens"]

    def decode(rows: list[int], limit: int) -> list[list[int]]:
        batch = pad([ids[r] for r in rows])
        with torch.inference_mode():
            out = hf.generate(
                input_ids=batch,
                attention_mask=batch.ne(PAD),
                num_beams=1,
                max_new_tokens=limit + 1,
                **extra,
            )
        return [[i for i in x[1:] if i not in (EOS, PAD)] for x in out.tolist()]

    return _in_groups([len(x) - 1 - mark for x in ids], limit_of, decode)


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
@pytest.mark.parametrize("guard, n", CASES)
def test_marian_translates_each_direction_as_mt(exported, loaded, sources, mt_greedy, guard, n):
    from transformers import MarianMTModel, MarianTokenizer

    folder, _ = exported["marian"]
    card = _card(folder)
    tok = loaded.tokenizer
    hf = MarianMTModel.from_pretrained(folder).eval()
    hf_tok = MarianTokenizer.from_pretrained(folder)
    theirs = {}
    for s, t in PAIRS:
        ask = card["languages"][t]
        front = ask.get("source_prefix", "")
        lines = sources[s][:n]
        ids = hf_tok([front + line for line in lines]).input_ids
        mark = [tok.lang_id(t)] if front else []
        assert ids == [mark + x for x in tok.encode_src(lines)]  # mt's source ids
        out = _marian_direction(hf, ids, ask, guard, len(mark), _limit_of(loaded))
        theirs[s, t] = [tok.decode_tgt(x) for x in out]
    _assert_same(mt_greedy(guard, n), theirs, f"marian {card['placement']} guard={guard}")


def test_export_says_how_to_ask_for_each_language(exported, loaded):
    from mt.tokenizer import BOS, EOS, PAD

    langs = loaded.tokenizer.languages
    for engine, (folder, printed) in exported.items():
        card = _card(folder)
        assert card["placement"] == langs.placement and card["pairs"] == MULTI_PAIRS
        assert sorted(card["languages"]) == sorted(langs.targets)
        for lang, ask in card["languages"].items():
            if engine == "ctranslate2":
                ids = {loaded.tokenizer.tgt.piece_to_id(p) for [p] in ask["suppress_sequences"]}
            else:
                ids = set(ask["suppress_tokens"])
            allowed = langs.allowed(lang, loaded.cfg.decode.target_vocab_ratio)
            assert ids == {int(i) for i in (~allowed).nonzero()[0]} | {PAD, BOS}
            assert EOS not in ids
        first = next(iter(card["languages"]))
        assert str(folder / "languages.json") in printed
        if engine == "ctranslate2":
            assert f'"<2{first}>"' in printed
        elif langs.placement == "source":
            assert f'">>{first}<< "' in printed
        else:
            assert f"decoder_start_token_id={loaded.tokenizer.lang_id(first)}" in printed


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
def test_without_a_language_a_target_placement_export_refuses(exported, loaded, sources):
    """The decoder must start from a language token: asked for none, both engines refuse rather
    than start from BOS (a sequence the model never saw). The source placement needs none."""
    import ctranslate2
    from transformers import MarianMTModel, MarianTokenizer

    target = loaded.tokenizer.languages.placement == "target"
    pieces = [loaded.tokenizer.src.encode(sources["de"][0], out_type=str)]
    translator = ctranslate2.Translator(str(exported["ctranslate2"][0]), intra_threads=1)
    folder = exported["marian"][0]
    hf, hf_tok = MarianMTModel.from_pretrained(folder), MarianTokenizer.from_pretrained(folder)
    batch = hf_tok(sources["de"][:1], return_tensors="pt")
    if not target:
        assert translator.translate_batch(pieces, beam_size=1, max_decoding_length=5)
        assert hf.generate(**batch, num_beams=1, max_new_tokens=5).shape[0] == 1
        return
    with pytest.raises(ValueError, match="decoder start token"):
        translator.translate_batch(pieces, beam_size=1, max_decoding_length=5)
    with pytest.raises(ValueError, match="decoder_start_token_id"):
        hf.generate(**batch, num_beams=1, max_new_tokens=5)
