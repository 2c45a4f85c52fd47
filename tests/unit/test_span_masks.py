"""A step's banned tokens as the search applies them (`mt.spans.masks.RowMask`): applying one to
logits sets exactly the entries its dense form marks, whole or a block of rows at a time."""

from __future__ import annotations

import random

import pytest
import torch

from mt.spans.bans import Bans, step_bans
from mt.spans.masks import RowMask

V, R = 40, 12


def _mask(rng: random.Random, dense_rows: bool) -> RowMask:
    """A mask with a shared part, tokens freed and added per row, and perhaps rows of its own."""
    common = torch.zeros(V, dtype=torch.bool)
    common[rng.sample(range(V), 6)] = True
    cols = common.nonzero().squeeze(1).tolist()
    freed = sorted({(r, rng.choice(cols)) for r in rng.sample(range(R), 4)})
    added = sorted({(r, rng.randrange(V)) for r in rng.sample(range(R), 5) for _ in range(3)})
    rows = torch.tensor(sorted(rng.sample(range(R), 3)) if dense_rows else [], dtype=torch.long)
    own = torch.rand(len(rows), V) < 0.3
    reach = 1 + max(r for r, _ in freed + added)
    return RowMask(common, rows, own, torch.tensor(freed).T, torch.tensor(added).T, reach)


@pytest.mark.parametrize("dense_rows", [False, True])
def test_applying_a_mask_sets_what_its_dense_form_marks(dense_rows: bool) -> None:
    """Freed tokens keep their logits, added ones and the shared ones go to -inf, rows of
    their own follow their own mask; applied to the whole step or to blocks of its rows."""
    rng = random.Random(0)
    for _ in range(50):
        mask = _mask(rng, dense_rows)
        logits = torch.randn(R, V)
        dense = mask.dense(R)
        assert dense.shape == (R, V)
        want = logits.masked_fill(dense, float("-inf"))
        whole = logits.clone()
        mask.apply(whole)
        assert torch.equal(whole, want)
        blocks = logits.clone()
        for start in range(0, R, 5):
            mask.apply(blocks[start : start + 5], start)
        assert torch.equal(blocks, want)
        # The dense form itself: a freed token is writable on its row (unless added back
        # or the row has a mask of its own), still banned on rows that did not free it.
        added = set(map(tuple, mask.added.T.tolist()))
        own_rows = set(mask.rows.tolist())
        for r, v in mask.freed.T.tolist():
            if r not in own_rows and (r, v) not in added:
                assert not dense[r, v]


def test_a_vocabulary_ban_is_not_freed_by_a_sentence_s_spans() -> None:
    """A token a fixed vocabulary mask bans stays banned on a row whose sentence may write it
    as a span (`step_bans` joins the two)."""
    rng = random.Random(1)
    mask = _mask(rng, False)

    class Rule:
        def rows_mask(self, history, sent, allowed, parents=None):
            return mask

    vocab = torch.zeros(V, dtype=torch.bool)
    freed_token = mask.freed[1, 0].item()
    vocab[freed_token] = True
    joined = step_bans(Bans(vocab=vocab, spans=Rule()), torch.zeros(R, 1), torch.zeros(R))  # type: ignore[arg-type]
    dense = joined.dense(R)
    assert dense[:, freed_token].all()
    assert torch.equal(dense, mask.dense(R) | vocab)
