"""Rows' open texts carried as integers from step to step (`mt.spans.carry`): whatever way a
search reorders, repeats, drops or restarts its rows, every row is banned as its whole text
says."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from support.span_inputs import ALLOWED, DENSE

from mt.spans.bans import SpanRule
from mt.spans.carry import RowStates
from mt.spans.index import PieceIndex
from mt.spans.open import open_starts, reached
from mt.spans.rows import STATES, OpenTexts, kind, read

CPU = torch.device("cpu")


def _want(rule: SpanRule, rows: list[list[int]], sents: list[int], allowed) -> torch.Tensor:
    """(R, V): each row's mask read off its whole text alone (`SpanRule.row_bans`)."""
    out = rule.alone.expand(len(rows), -1).clone()
    for r, (row, s) in enumerate(zip(rows, sents)):
        out[r, rule._free(allowed[s])] = False
        ids = rule.row_bans("".join(rule.texts[v] for v in row), allowed[s])
        if ids is not None:
            out[r, ids] = True
    return out


@pytest.mark.parametrize("given", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_carried_rows_are_banned_as_their_texts_say(seed: int, given: bool) -> None:
    """A beam-like search over the nested vocabulary of `scripts/tools/ban_hunt.py`: each step's
    rows extend random rows of the step before (some twice, some dropped); now and then a row
    extends none of them, a new search starts, or another search's step comes between. Every
    row's mask equals the one read off its text. `given`: the search passes each row's parent
    where it knows it (not where a row extends none, or another step came between on the same
    rule), and the rule takes it in place of the hash."""
    rng = random.Random(seed)
    rule = SpanRule(None, CPU, PieceIndex(DENSE))  # type: ignore[arg-type]
    other = SpanRule(None, CPU, rule.index)  # another translator on the same index
    pieces = [v for v, t in enumerate(DENSE) if t]
    allowed = [tuple(rng.sample(ALLOWED, rng.randrange(0, 3))) for _ in range(3)]
    rows: list[list[int]] = []
    sents: list[int] = []
    carried = taken = 0
    for _ in range(300):
        parents: list[int] | None = None
        if not rows or rng.random() < 0.05 or len(rows[0]) >= 25:  # a new search
            sents = [rng.randrange(3) for _ in range(rng.randrange(1, 7))]
            rows = [[rng.choice(pieces)] for _ in sents]
        else:
            parents = [rng.randrange(len(rows)) for _ in range(rng.randrange(1, 9))]
            rows = [rows[p] + [rng.choice(pieces)] for p in parents]
            sents = [sents[p] for p in parents]
        if rows and len(rows[0]) > 1 and rng.random() < 0.2:  # a row that extends none
            k = rng.randrange(len(rows))
            rows[k] = [rng.choice(pieces) for _ in rows[k]]
            parents = None
        if rng.random() < 0.1:  # another search's step between two of ours, on either rule
            between = rng.choice([rule, other])
            row = torch.tensor([rows[0][:-1] + [pieces[0]]])
            between.rows_mask(row, torch.zeros(1, dtype=torch.long), allowed)
            parents = parents if between is other else None
        history, sent = torch.tensor(rows), torch.tensor(sents)
        hint = torch.tensor(parents) if given and parents is not None else None
        got = rule.rows_mask(history, sent, allowed, hint).dense(len(rows))
        taken += hint is not None and rule.row_states._carried.hashes is None
        got = got.expand(len(rows), -1) if got.dim() == 1 else got
        assert torch.equal(got, _want(rule, rows, sents, allowed)), [
            "".join(DENSE[v] for v in row) for row in rows
        ]
        carried += len(rows) > 0 and len(rows[0]) > 1
    assert carried > 200  # most steps were carried from the step before
    assert taken > 150 if given else taken == 0


def test_a_row_takes_its_parents_state_only_where_its_tokens_extend_it() -> None:
    """A row's parent is found by its tokens' hash and checked on the tokens: an equal hash
    over other tokens finds none, and a row whose parent was not a row of the previous call is
    read from its text."""
    opens = OpenTexts(DENSE, PieceIndex(DENSE).opener)
    states = RowStates(opens)
    pct, s, word, lt = DENSE.index("%"), DENSE.index("s"), DENSE.index("x"), DENSE.index("<")
    first = states.ids(np.array([[pct], [word]]))
    assert opens.states[first[0]] is not None and first[1] == 0  # `%` opens a span, `x` none
    kept = states._carried
    assert kept is not None
    same_hash = kept.hashes[list(kept.order).index(0)]  # the hash of the row `%`
    found, pids = states._parents(np.array([[pct, s], [word, s]]), np.array([same_hash] * 2))
    assert found.tolist() == [True, False] and pids[0] == first[0]
    rows = [[pct, word], [word, s], [lt, s]]  # the last extends no row of the first call
    grown = states.ids(np.array(rows))
    for row, i in zip(rows, grown.tolist()):
        text = "".join(DENSE[v] for v in row)
        assert opens.states[i] == read(text, open_starts(text)), text
    assert grown[1] == 0 and opens.states[grown[2]] is not None  # `xs` holds no span, `<s` a tag


def test_the_scan_is_taken_up_where_nothing_was_under_way() -> None:
    """After a row that holds no open text, the scan of the row grown by a piece reaches the
    same starts from the row's end as from the line's start (`reached`'s `decided`)."""
    rng = random.Random(4)
    checked = 0
    for _ in range(4000):
        before = "".join(rng.choice(DENSE) for _ in range(rng.randrange(0, 12)))
        if read(before, open_starts(before)) is not None:
            continue
        text = before + rng.choice(DENSE)
        starts = open_starts(text, len(before))
        assert reached(text, starts, len(before)) == reached(text, starts), text
        checked += bool(starts)
    assert checked > 500


def test_an_open_text_kept_by_piece_and_kind_is_the_one_read() -> None:
    """After rows that hold nothing under way, the open text a piece opens is kept by the
    piece and the kind of character before it (`OpenTexts._opened`): over random rows, every
    answer, kept or read, is the one read off the row's text from the piece on."""
    # And pieces whose span starts after a mark of their own (` '%`, `(%`, ` -f`).
    texts = DENSE + [" '%", "(%", ":%", " -f", "'<b", "x%s", "=%", " [<", '"%1$', ".$", "-%%"]
    opens = OpenTexts(texts, PieceIndex(texts).opener)
    rng = random.Random(5)
    # Rows that end in a span already written (`&amp;`, `%%`) as well as in words and marks.
    words = ["x", " ", "5", ".", "ex", "%%", "%", "s", "d", "<", "b", "/", "&amp;", "&lt;", "@"]
    kept = inside = 0
    for _ in range(5000):
        before = "".join(rng.choice(words + DENSE) for _ in range(rng.randrange(0, 8)))
        if read(before, open_starts(before)) is not None:
            continue
        v = rng.choice([v for v, t in enumerate(texts) if opens.opener[v] and "@" not in t])
        text = before + texts[v]
        lo = len(before)
        known = (v, kind(text[lo - 1]) if lo else "") in opens._opens
        kept += known
        inside += known and v >= len(DENSE)
        assert opens._opened(text, v) == read(text, open_starts(text, lo), lo), text
    assert kept > 300 and inside > 100


def test_steps_looked_up_together_are_the_steps_kept() -> None:
    """`OpenTexts.known` answers for a step's rows at once what `step` kept one by one: the id
    of each (state, piece) met, -1 for the others, while the table is laid out again as it
    grows and after the ids start again (`bound`)."""
    opens = OpenTexts(DENSE, PieceIndex(DENSE).opener)
    rng = random.Random(6)
    met: dict[tuple[int, int], int] = {}
    asked = found = 0
    for k in range(4000):
        text = "".join(rng.choice(DENSE) for _ in range(rng.randrange(1, 8)))
        state = read(text, open_starts(text))
        if state is not None:
            sid, v = opens.intern(state), rng.randrange(len(DENSE))
            if (out := opens.step(sid, v)) is not None:
                met[(sid, v)] = out
        if k % 97 == 0 and met:
            pairs = rng.sample(list(met), min(40, len(met)))
            pairs += [(rng.randrange(1, len(opens.states)), rng.randrange(len(DENSE)))
                      for _ in range(20)]  # fmt: skip
            states, pieces = (np.array(x, dtype=np.int64) for x in zip(*pairs))
            got = opens.known(states, pieces).tolist()
            assert all(g in (-1, met.get(p, -1)) for g, p in zip(got, pairs))
            assert all(g == -1 for g, p in zip(got, pairs) if p not in met)
            asked += len(pairs)
            found += sum(g >= 0 for g in got)
    assert len(opens._table[0]) > 500 and found > asked / 3
    states, pieces = (np.array(x, dtype=np.int64) for x in zip(*met))
    got = opens.known(states, pieces).tolist()
    assert all(g in (-1, m) for g, m in zip(got, met.values()))
    assert sum(g >= 0 for g in got) >= 0.75 * len(met)  # what `step` added since: up to a quarter
    opens.states += [None] * STATES  # as many ids as `bound` keeps
    opens.bound()
    assert (opens.known(states, pieces) == -1).all()
