"""A glossary's boost (mt.glossary.boost): which pieces each row raises at each step, how the
search applies it (once per token, before the log-softmax, through a shortlist's columns), and
what it changes in a translation: the terms of the lines that hold them, nothing else."""

from __future__ import annotations

from pathlib import Path

import torch

from mt.glossary.boost import TermBoost
from mt.search.rules import Boost, Columns, OutputColumns, Step, StepRules
from mt.tokenizer import PAD


def raised(rule: TermBoost, history: list[list[int]], sent: list[int]) -> list[set[int]]:
    """The tokens each row's step raises, given what the rows wrote."""
    hist = torch.tensor(history, dtype=torch.long).reshape(len(sent), -1)
    said = rule.restrict(Step(hist.size(1), torch.tensor(sent), hist))
    if said is None:
        return [set() for _ in sent]
    assert said.boost is not None and said.boost.bonus == 2.5
    return [{int(x) for x in row if x != PAD} for row in said.boost.tokens]


def test_first_pieces_until_written_next_piece_once_begun():
    # sentence 0: terms [7, 8, 9] and [11]; sentence 1: none; sentence 2: [5] twice
    rule = TermBoost([[[7, 8, 9], [11]], [], [[5], [5]]], 2.5, torch.device("cpu"))
    assert raised(rule, [[], [], []], [0, 1, 2]) == [{7, 11}, set(), {5}]
    # a term begun is continued: its next piece alone, no term's first piece beside it
    assert raised(rule, [[4, 7], [4, 4], [5, 6]], [0, 1, 2]) == [{8}, set(), {5}]
    assert raised(rule, [[7, 8], [4, 4], [5, 5]], [0, 1, 2]) == [{9}, set(), set()]
    assert raised(rule, [[7, 4]], [0]) == [{7, 11}]  # left unfinished: begun again
    # [7, 8, 9] written: only [11] is left, and nothing once it is written too
    assert raised(rule, [[7, 8, 9], [11, 3, 3]], [0, 0]) == [{11}, {7}]
    assert rule.restrict(Step(4, torch.tensor([0]), torch.tensor([[7, 8, 9, 11]]))) is None


def test_a_boost_adds_its_bonus_once_before_the_softmax_and_bans_still_hold():
    logits = torch.zeros(2, 10)
    boost = Boost(torch.tensor([[3, 3, PAD], [5, 6, PAD]]), 1.5)
    rules = StepRules(support=(Columns(torch.tensor([6])),), boosts=(boost,))
    rules.restrict_support(logits)
    inf = float("-inf")
    assert logits[0].tolist() == [0, 0, 0, 1.5, 0, 0, inf, 0, 0, 0]  # 3 named twice: once
    assert logits[1, 5] == 1.5 and logits[1, 6] == float("-inf") and logits[1, PAD] == 0.0


def test_through_a_shortlist_a_boosted_piece_outside_the_columns_raises_nothing():
    cols = OutputColumns.of(torch.tensor([0, 1, 2, 3, 7, 9]), 12)
    narrowed = cols.narrow(StepRules(boosts=(Boost(torch.tensor([[7, 8, 9]]), 2.0),)))
    logits = torch.zeros(1, 6)
    narrowed.restrict_support(logits)
    assert logits[0].tolist() == [0.0, 0.0, 0.0, 0.0, 2.0, 2.0]  # 8 is not a column


def test_the_boost_writes_terms_and_leaves_other_lines_alone(tiny_run: Path, tmp_path: Path):
    """On the fixtures' tiny model: a large boost puts a term the model never writes into
    its line (soft: the boost alone), the lines without a term come out as without the
    glossary, and the guard's lines still hold every term."""
    from mt.glossary.files import read_glossary
    from mt.translation.options import DecodeOptions
    from mt.translation.requests import Plan, Request
    from mt.translation.session import Session

    terms = tmp_path / "terms.tsv"
    terms.write_text("de\ten\nHund\tzebra\n", encoding="utf-8")
    session = Session([tiny_run / "best.pt"], "cpu")
    glossary = read_glossary(terms, "de", "en")
    lines = ["Ein Hund läuft.", "Zwei Männer spielen Fußball.", "Der Hund schläft."]

    def run(boost: float, plan: Plan | None) -> list[str]:
        translator = session.translator(DecodeOptions(glossary_boost=boost))
        reqs = [Request(x, plan=plan or Plan(), glossary=glossary if plan else None) for x in lines]
        return [t.text for t in translator.translate(reqs)]

    plain = run(0.0, None)
    assert not any("zebra" in x for x in plain)
    soft = run(30.0, Plan(glossary_soft=True))
    assert "zebra" in soft[0] and "zebra" in soft[2] and soft[1] == plain[1]
    guard = run(3.0, Plan())
    assert "zebra" in guard[0] and "zebra" in guard[2] and guard[1] == plain[1]
