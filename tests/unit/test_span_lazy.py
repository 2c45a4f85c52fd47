"""The span ban checked lazily (`mt.spans.lazy`): a row's best k tokens and their scores are
those of the whole ban, whatever the logits favour, and a row's unchecked candidates are
checked only as far as its best k reach."""

from __future__ import annotations

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mt.decode.steps import row_topk
from mt.spans.bans import SpanRule
from mt.spans.index import PieceIndex, piece_texts
from mt.spans.lazy import Unconfirmed
from tests.unit.test_span_index import ENDINGS, strings_tokenizer  # noqa: F401

CPU = torch.device("cpu")
# Open texts the software-strings model wrote most (` %06.2222`: a printf under way), after
# words, so the row is read as a search writes it.
PRINTF = [" %", " %0", " %06", " %06.", " %06.2", " %-", " %l", " %.", " %1", " %%(", " %("]


def _rows(tok, endings: list[str]) -> list[list[int]]:
    """Token rows of `endings` after a few words, one token history each."""
    return [tok.encode_tgt(["Copy the file" + e])[0] for e in endings]


def _fresh(tok) -> SpanRule:
    """A rule with an index of its own: every open text new, as in a fresh `mt translate`."""
    return SpanRule(tok, CPU, index=PieceIndex(piece_texts(tok)))


def _ranked(rule: SpanRule, history, ok, logits, k: int, lazy: bool):
    """The best k of `logits` (R, V) for rows `history` (R, t) under the ban, checked whole or
    lazily (and what was left pending)."""
    out = logits.clone()
    pending = Unconfirmed(rule.index) if lazy else None
    sent = torch.zeros(len(history), dtype=torch.long)
    rule.rows_mask(history, sent, [ok], pending).apply(out)
    top, tok = row_topk(out, k)
    if pending is not None:
        pending.settle(out, top, tok, 0, lambda x: row_topk(x, k))
    return top, tok, pending


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ending=st.sampled_from(ENDINGS + PRINTF),
    k=st.sampled_from([1, 2, 10]),
    favour=st.floats(0.0, 30.0),
    seed=st.integers(0, 2**16),
    ok=st.sampled_from([(), ("%s",), ("%d", "<b>"), ("$HOME",)]),
)
def test_lazy_ranks_as_the_whole_ban_does(strings_tokenizer, ending, k, favour, seed, ok) -> None:  # noqa: F811
    """Random logits, the pieces the whole ban bans and the walk's candidates favoured by up to
    `favour` (so banned pieces reach the best k): the lazy best k are the whole ban's, token
    for token and score for score, none of them banned, and no allowed piece kept out."""
    tok = strings_tokenizer
    history = torch.tensor(_rows(tok, [ending]))
    eager_rule, lazy_rule = _fresh(tok), _fresh(tok)
    g = torch.Generator().manual_seed(seed)
    V = len(eager_rule.texts)
    banned = eager_rule.mask(history, torch.zeros(1, dtype=torch.long), [ok])
    banned = banned if banned.dim() == 1 else banned[0]
    logits = torch.randn(1, V, generator=g)
    logits[0, banned] += favour * torch.rand(int(banned.sum()), generator=g)
    state = lazy_rule.open_texts.of(
        "".join(lazy_rule.texts[v] for v in history[0].tolist()), int(history[0, -1])
    )
    if state is not None:
        head, end, starts = state
        cands = lazy_rule.index.candidates(head, end, list(starts))
        logits[0, cands] += favour * torch.rand(len(cands), generator=g)
    want_top, want_tok, _ = _ranked(eager_rule, history, ok, logits, k, lazy=False)
    got_top, got_tok, _ = _ranked(lazy_rule, history, ok, logits, k, lazy=True)
    assert not banned[got_tok[0]].any(), (ending, [lazy_rule.texts[v] for v in got_tok[0]])
    assert torch.equal(got_top, want_top) and torch.equal(got_tok, want_tok), ending


def test_lazy_checks_only_what_the_rows_rank(strings_tokenizer) -> None:  # noqa: F811
    """Rows of printf specifiers under way, each ranked with a new index: the rows are left
    pending (their open texts new), their best k equal the whole ban's, and fewer candidates
    are checked than the walk found (the rest stays unchecked until a row ranks it)."""
    tok = strings_tokenizer
    histories = _rows(tok, PRINTF)
    width = max(map(len, histories))
    history = torch.tensor([[h[0]] * (width - len(h)) + h for h in histories])
    eager_rule, lazy_rule = _fresh(tok), _fresh(tok)
    logits = torch.randn(
        len(history), len(eager_rule.texts), generator=torch.Generator().manual_seed(1)
    )
    want_top, want_tok, _ = _ranked(eager_rule, history, (), logits, 10, lazy=False)
    got_top, got_tok, pending = _ranked(lazy_rule, history, (), logits, 10, lazy=True)
    assert torch.equal(got_top, want_top) and torch.equal(got_tok, want_tok)
    assert pending is not None and len(pending.rows) >= len(PRINTF) // 2
    looks = {id(look): look for look, _, _ in pending.rows.values()}.values()
    found = sum(len(look.candidates) for look in looks)
    unchecked = sum(len(look.open) for look in looks)
    assert 0 < unchecked < found


def test_lazy_lets_through_what_the_sentence_may_write(strings_tokenizer) -> None:  # noqa: F811
    """A sentence allowed some of the spans a printf under way could become (its source's
    own): the candidates completing them, favoured above all, are ranked first, lazily as
    with the whole ban, and the banned candidates favoured next are kept out, the first time
    and again with the answers then checked."""
    tok = strings_tokenizer
    for ending in PRINTF:
        history = torch.tensor(_rows(tok, [ending]))
        eager_rule, lazy_rule = _fresh(tok), _fresh(tok)
        text = "".join(eager_rule.texts[v] for v in history[0].tolist())
        state = eager_rule.open_texts.of(text, int(history[0, -1]))
        if state is None:
            continue
        found = eager_rule.index.completing(state[0], state[1], list(state[2]))
        ok = tuple(x for _, spans in found[:3] for x in spans)
        logits = torch.randn(1, len(eager_rule.texts), generator=torch.Generator().manual_seed(2))
        logits[0, [v for v, _ in found[:20]]] += 20.0  # the rest left unchecked
        logits[0, [v for v, _ in found[:3]]] += 20.0
        want_top, want_tok, _ = _ranked(eager_rule, history, ok, logits, 10, lazy=False)
        assert {v for v, _ in found[:3]} <= set(want_tok[0].tolist()), ending  # not empty
        for _ in range(2):  # the second time, with the answers checked the first time
            got_top, got_tok, pending = _ranked(lazy_rule, history, ok, logits, 10, lazy=True)
            assert torch.equal(got_top, want_top) and torch.equal(got_tok, want_tok), ending
            assert len(found) <= 20 or pending is not None, ending  # checked in part
