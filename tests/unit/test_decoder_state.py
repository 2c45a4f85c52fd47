"""The decoder's self-attention cache (mt/decoder_state.py `SelfCache`): buffers written in
place, grown and reordered, hold exactly what concatenating and index-selecting every step
would hold."""

from __future__ import annotations

import pytest
import torch

from mt.decoder_state import SelfCache


def test_the_cache_holds_what_cat_and_index_select_give_over_many_steps():
    g = torch.Generator().manual_seed(0)
    rows, heads, width = 6, 2, 4
    cache, ref_k, ref_v = SelfCache(), None, None
    for t in range(40):  # past the first room (16) and its doubling (34)
        k = torch.randn(rows, heads, 1, width, generator=g)
        v = torch.randn(rows, heads, 1, width, generator=g)
        got_k, got_v = cache.append(k, v)
        ref_k = k if ref_k is None else torch.cat([ref_k, k], 2)
        ref_v = v if ref_v is None else torch.cat([ref_v, v], 2)
        assert torch.equal(got_k, ref_k) and torch.equal(got_v, ref_v)
        if t % 3 == 1:  # beams move (same rows: the spare buffers are reused)
            index = torch.randint(0, rows, (rows,), generator=g)
            cache, ref_k, ref_v = cache.select(index), ref_k[index], ref_v[index]
        if t in (20, 30):  # a sentence leaves: fewer rows
            rows -= 2
            index = torch.arange(rows)
            cache, ref_k, ref_v = cache.select(index), ref_k[index], ref_v[index]
        assert cache.length == t + 1
        assert torch.equal(cache.k, ref_k) and torch.equal(cache.v, ref_v)


def test_a_cache_selected_from_is_spent():
    cache = SelfCache()
    cache.append(torch.ones(2, 1, 1, 3), torch.ones(2, 1, 1, 3))
    kept = cache.select(torch.tensor([1, 0]))
    with pytest.raises(ValueError, match="selected from"):
        cache.append(torch.ones(2, 1, 1, 3), torch.ones(2, 1, 1, 3))
    with pytest.raises(ValueError, match="selected from"):
        cache.select(torch.tensor([0]))
    assert kept.append(torch.zeros(2, 1, 1, 3), torch.zeros(2, 1, 1, 3))[0].shape == (2, 1, 2, 3)
    assert SelfCache().select(torch.tensor([0])).length == 0
