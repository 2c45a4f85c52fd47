"""scripts/studies/update_rank.py's cut: each output of a fused projection cut apart to rank r,
the vectors left at the base's, a full rank giving the tuned weights back."""

import torch

from scripts.studies.update_rank import cut, sparse_cut


def test_cut_keeps_rank_per_output_and_the_base_vectors():
    g = torch.Generator().manual_seed(0)
    base = {
        "encoder.0.attn.qkv.weight": torch.randn(12, 4, generator=g),
        "decoder.0.cross_attn.kv.weight": torch.randn(8, 4, generator=g),
        "decoder.0.ffn.fc1.weight": torch.randn(6, 4, generator=g),
        "decoder.0.ffn.fc1.bias": torch.randn(6, generator=g),
    }
    tuned = {k: v + torch.randn(v.shape, generator=g) for k, v in base.items()}
    one = cut(base, tuned, 1)
    assert torch.equal(one["decoder.0.ffn.fc1.bias"], base["decoder.0.ffn.fc1.bias"])
    for name, parts in (("encoder.0.attn.qkv.weight", 3), ("decoder.0.cross_attn.kv.weight", 2),
                        ("decoder.0.ffn.fc1.weight", 1)):  # fmt: skip
        update = (one[name] - base[name]).double()
        for part in update.chunk(parts):
            assert torch.linalg.matrix_rank(part, atol=1e-5) == 1
        assert torch.linalg.matrix_rank(update, atol=1e-5) == parts  # cut apart, not together
    full = cut(base, tuned, 4)
    for name in base:
        if base[name].dim() == 2:
            torch.testing.assert_close(full[name], tuned[name])


def test_sparse_cut_keeps_the_largest_entries_of_each_matrix():
    g = torch.Generator().manual_seed(1)
    base = {"a.weight": torch.randn(10, 10, generator=g), "a.bias": torch.randn(10, generator=g)}
    tuned = {k: v + torch.randn(v.shape, generator=g) for k, v in base.items()}
    kept = sparse_cut(base, tuned, 0.05)
    update = kept["a.weight"] - base["a.weight"]
    moved = update.abs() > 0
    assert int(moved.sum()) == 5  # 5% of 100 entries
    full = (tuned["a.weight"] - base["a.weight"]).abs()
    assert full[moved].min() >= full[~moved].max()  # the largest, not any five
    torch.testing.assert_close(update[moved], (tuned["a.weight"] - base["a.weight"])[moved])
    assert torch.equal(kept["a.bias"], base["a.bias"])
    assert torch.equal(sparse_cut(base, tuned, 1.0)["a.weight"], tuned["a.weight"])
