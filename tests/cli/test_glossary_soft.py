"""A model trained with terms (`data.terms`) reads its glossary's terms written into the
source: the annotated line is what reaches the model, on every path (the guard's searches,
`--glossary-hard`, `Plan.glossary_soft`); a model trained without keeps its behaviour.

The tests on a model trained with terms (the `tiny_terms_run` fixture: some 15 s on two busy
cores) are slow ones; the default suite checks the same path on an untrained model."""

from __future__ import annotations

from pathlib import Path

import pytest

from mt.checkpoint import load_model
from mt.data.terms import LEXICON_FILE
from mt.errors import MtError
from mt.glossary import Glossary
from mt.glossary.inline import TERM, annotate, takes_terms
from mt.glossary.lexicon import Lexicon
from mt.spans import find_spans
from mt.translation.requests import Plan, Request
from mt.translation.session import Session

GLOSSARY = Glossary.from_pairs(
    [("Hund", "hound"), ("roter Ball", "crimson sphere"), ("Frau", "lady")], "de", tgt_lang="en"
)
LINES = [
    "Ein Hund rennt über die Wiese.",  # a term
    "Zwei Hunde spielen mit einem roten Ball.",  # an inflected term and a multi-word one
    "Ein Mann fährt Fahrrad.",  # none
    "Siehe https://example.org/Hund jetzt.",  # only inside a protected span: none
    "",
]


def reaching(translator) -> list[list[tuple[str, tuple[str, ...]]]]:  # noqa: ANN001
    """Records each round of search: (source, constraints) of every request it gets."""
    rounds: list[list[tuple[str, tuple[str, ...]]]] = []
    search = translator._search_batches

    def record(requests, alignment, protect):  # noqa: ANN001, ANN202
        rounds.append([(r.src, tuple(r.constraints)) for r in requests])
        return search(requests, alignment, protect)

    translator._search_batches = record
    return rounds


def annotated(line: str) -> str:
    """`line` as the glossary stage writes it: its terms outside protected spans annotated."""
    protected = [(s.start, s.end) for s in find_spans(line)]
    found = GLOSSARY.find(line, protected)
    return annotate(line, [(m.start, m.end, m.entry.tgt) for m in found])


def test_annotation_reaches_an_untrained_model_with_markers(tmp_path: Path):
    """The default suite's check, with no training: a random model whose tokenizer holds
    the markers gets the annotated lines; without them, the lines as written."""
    import torch

    from mt.config import DecodeConfig, ModelConfig, TokenizerConfig
    from mt.glossary.inline import MARKERS
    from mt.model import Transformer
    from mt.tokenizer import train_tokenizer
    from mt.translation.translator import Translator

    text = [x for x in LINES if x] * 30 + ["the hound and the crimson sphere of a lady"] * 30
    torch.manual_seed(0)
    for reserved, expect in ((list(MARKERS), True), (None, False)):
        tok = train_tokenizer(text, text, TokenizerConfig(vocab_size=120), reserved)
        model = Transformer(ModelConfig(64, 2, 64, 1, 1), tok.src_vocab_size, tok.tgt_vocab_size)
        cfg = DecodeConfig(beam=2, max_len_a=0.0, max_len_b=4)
        translator = Translator(model.eval(), tok, cfg, torch.device("cpu"))
        rounds = reaching(translator)
        translator.translate([Request(x, glossary=GLOSSARY) for x in LINES[:3]])
        first = [src for src, _ in rounds[0]]
        assert first == ([annotated(x) for x in LINES[:3]] if expect else LINES[:3])


@pytest.mark.slow
def test_the_run_keeps_its_lexicon_and_the_checkpoint_its_markers(tiny_terms_run: Path):
    lexicon = Lexicon.load(tiny_terms_run / LEXICON_FILE)
    assert len(lexicon) > 50 and (lexicon.src_lang, lexicon.tgt_lang) == ("de", "en")
    loaded = load_model(tiny_terms_run / "best.pt")
    assert loaded.cfg.data.terms.share == 0.3 and takes_terms(loaded.tokenizer)


@pytest.mark.slow
@pytest.mark.parametrize("plan", [Plan(), Plan(glossary_hard=True), Plan(glossary_soft=True)])
def test_the_annotated_source_reaches_the_model(tiny_terms_run: Path, plan: Plan):
    translator = Session([tiny_terms_run / "best.pt"], "cpu").translator()
    rounds = reaching(translator)
    plain = [t.text for t in translator.translate([Request(x) for x in LINES])]
    rounds.clear()
    done = translator.translate([Request(x, plan=plan, glossary=GLOSSARY) for x in LINES])
    first = dict(rounds[0])
    # The lines with terms annotated, the others as written (the URL's line masked by the
    # protection stage below: its `Hund` is no term).
    assert {annotated(x) for x in LINES[:3]} <= set(first)
    assert annotated(LINES[0]).count(TERM) == 1 and annotated(LINES[1]).count(TERM) == 2
    assert annotated(LINES[2]) == LINES[2] and annotated(LINES[3]) == LINES[3]
    assert sum(TERM in src for src in first) == 2
    if plan.glossary_hard:
        assert first[annotated(LINES[1])] == ("hound", "crimson sphere")
    else:
        assert all(not c for c in first.values())
    if plan.glossary_soft:  # one search, no constraint (the URL's line searched apart)
        assert all(not c for r in rounds for _, c in r) and len(rounds) == 2
    # The guard's second search (the tiny model misses its terms) reads the annotated line.
    again = [(src, c) for r in rounds[1:] for src, c in r if c]
    assert bool(again) == (plan == Plan()) and all(TERM in src for src, _ in again)
    # Lines without a term come out as without the glossary, byte for byte.
    assert [done[i].text for i in (2, 3, 4)] == [plain[i] for i in (2, 3, 4)]
    if not plan.glossary_soft:
        assert "hound" in done[0].text and "crimson sphere" in done[1].text


@pytest.mark.slow
def test_a_model_without_terms_reads_the_line_as_written(tiny_run: Path):
    translator = Session([tiny_run / "best.pt"], "cpu").translator()
    assert not takes_terms(translator.tokenizer)
    rounds = reaching(translator)
    translator.translate([Request(x, glossary=GLOSSARY) for x in LINES])
    assert all(TERM not in src for r in rounds for src, _ in r)
    assert set(LINES[:3]) <= {src for src, _ in rounds[0]}
    with pytest.raises(MtError, match="--glossary-soft needs a model trained with terms"):
        translator.translate([Request(LINES[0], plan=Plan(glossary_soft=True), glossary=GLOSSARY)])


@pytest.mark.slow
def test_translate_with_a_glossary_on_a_model_trained_with_terms(tiny_terms_run, mt_cli, tmp_path):
    src = tmp_path / "src.de"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    terms = tmp_path / "terms.tsv"
    terms.write_text("de\ten\nHund\thound\nroter Ball\tcrimson sphere\n", encoding="utf-8")
    base = ["translate", tiny_terms_run, "-i", src, "--device", "cpu"]
    plain = mt_cli(*base)
    got = mt_cli(*base, "--glossary", terms)
    assert plain.rc == 0 and got.rc == 0, got.err
    before, after = plain.out.splitlines(), got.out.splitlines()
    assert len(after) == len(LINES) and [after[i] for i in (2, 3, 4)] == [
        before[i] for i in (2, 3, 4)
    ]
    assert "hound" in after[0] and "crimson sphere" in after[1]


def test_glossary_soft_errors_are_one_line(tiny_run: Path, mt_cli, tmp_path: Path):
    src = tmp_path / "src.de"
    src.write_text("Ein Hund.\n", encoding="utf-8")
    terms = tmp_path / "terms.tsv"
    terms.write_text("de\ten\nHund\thound\n", encoding="utf-8")
    base = ["translate", tiny_run, "-i", src, "--device", "cpu"]
    for extra, message in (
        (["--glossary-soft"], "--glossary-soft needs --glossary FILE"),
        (
            ["--glossary", terms, "--glossary-soft", "--glossary-hard"],
            "--glossary-soft and --glossary-hard cannot be combined",
        ),
        (  # without markers, soft is the boost alone: with the boost off, nothing is left
            ["--glossary", terms, "--glossary-soft", "--glossary-boost", "0"],
            "--glossary-soft needs a model trained",
        ),
    ):
        result = mt_cli(*base, *extra)
        assert result.rc == 2 and message in result.err, result.err
        assert "Traceback" not in result.err and result.out == ""
    ref = tmp_path / "ref.en"
    ref.write_text("A dog.\n", encoding="utf-8")
    args = ["--glossary", terms, "--glossary-soft", "--glossary-boost", "0"]
    result = mt_cli("eval", tiny_run, "--src", src, "--ref", ref, *args)
    assert result.rc == 2 and "--glossary-soft needs a model trained" in result.err


@pytest.mark.slow
def test_glossary_soft_is_one_search_even_greedy(tiny_terms_run: Path, mt_cli, tmp_path: Path):
    src = tmp_path / "src.de"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    terms = tmp_path / "terms.tsv"
    terms.write_text("de\ten\nHund\thound\n", encoding="utf-8")
    base = ["translate", tiny_terms_run, "-i", src, "--device", "cpu"]
    for extra in ([], ["--greedy"]):
        plain = mt_cli(*base, *extra)
        soft = mt_cli(*base, *extra, "--glossary", terms, "--glossary-soft")
        assert plain.rc == 0 and soft.rc == 0, soft.err
        before, after = plain.out.splitlines(), soft.out.splitlines()
        assert [after[i] for i in (2, 3, 4)] == [before[i] for i in (2, 3, 4)]
    # Greedy search takes no constraints: only the soft path takes a glossary there.
    refused = mt_cli(*base, "--greedy", "--glossary", terms)
    assert refused.rc == 2 and "a glossary needs the constrained beam" in refused.err
