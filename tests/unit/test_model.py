"""The Transformer: positions, masks, padding invariance, incremental decoding, shapes."""

from __future__ import annotations

import math

import pytest
import torch

from mt.config import ModelConfig
from mt.decoder_state import SelfCache, step_layout
from mt.model import PAD_ID, SHORT_QUERIES, DecoderState, Transformer, attend, sinusoids
from mt.tokenizer import BOS, EOS, PAD

V = 23


def tiny(norm: str = "post", tie: bool = True, src_vocab: int = V, tgt_vocab: int = V):
    torch.manual_seed(0)
    cfg = ModelConfig(
        d_model=32,
        n_heads=2,
        d_ff=64,
        encoder_layers=2,
        decoder_layers=2,
        dropout=0.1,
        norm=norm,
        tie_embeddings=tie,
        max_positions=64,
    )
    return Transformer(cfg, src_vocab, tgt_vocab).eval()


def random_ids(rows: int, length: int, vocab: int = V, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(EOS + 1, vocab, (rows, length), generator=g)


def padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Sources of lengths 7, 4, 2 and targets of lengths 6, 3, 5, right-padded."""
    src = random_ids(3, 7)
    src[:, -1] = EOS
    src[1, 4:] = PAD
    src[1, 3] = EOS
    src[2, 2:] = PAD
    src[2, 1] = EOS
    tgt = random_ids(3, 6, seed=2)
    tgt[:, 0] = BOS
    tgt[1, 3:] = PAD
    tgt[2, 5:] = PAD
    return src, tgt


def test_pad_id_matches_tokenizer():
    assert PAD_ID == PAD


@pytest.mark.parametrize(("pos", "i"), [(0, 0), (1, 0), (3, 1), (7, 5), (50, 15), (99, 3)])
def test_sinusoids_match_the_formula(pos, i):
    dim = 32
    pe = sinusoids(100, dim)
    assert pe.shape == (100, dim)
    angle = pos / 10000 ** (2 * i / dim)
    assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
    assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)


def test_model_positions_are_the_sinusoids():
    model = tiny()
    assert torch.equal(model.positions, sinusoids(64, 32))


def test_attend_zero_weight_on_masked_keys():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 2, 3, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=torch.bool)[:, None, None, :]
    y, w = attend(q, k, v, mask, 0.0, need_weights=True)
    assert w is not None and w.shape == (2, 2, 3, 5)
    assert torch.all(w[1, :, :, 2:] == 0)
    assert torch.allclose(w.sum(-1), torch.ones(2, 2, 3))
    # The explicit path computes what the fused kernel computes.
    fused, none = attend(q, k, v, mask, 0.0, need_weights=False)
    assert none is None
    assert torch.allclose(y, fused, atol=1e-6)
    # Masked keys' values do not matter.
    v2 = v.clone()
    v2[1, :, 2:] = 100.0
    assert torch.allclose(attend(q, k, v2, mask, 0.0, True)[0][1], y[1], atol=1e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_attend_in_bf16_matches_fp32_with_its_gradients(causal):
    # On CPU bf16 training takes the spelled-out path (torch's bf16 CPU kernel is slow): it must
    # still honour the padding mask and causality, forward and backward, within bf16's rounding.
    # 12 queries: more than a decoding step's, which attend in fp32.
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 2, 12, 16, requires_grad=True) for _ in range(3))
    mask = torch.ones(3, 1, 1, 12, dtype=torch.bool)
    mask[1, ..., 9:] = False
    key_mask = None if causal else mask
    g = torch.randn(3, 2, 12, 16)
    want, _ = attend(q, k, v, key_mask, 0.0, need_weights=False, causal=causal)
    want.backward(g)
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    half = [t.detach().bfloat16().requires_grad_() for t in (q, k, v)]
    with torch.autocast("cpu", dtype=torch.bfloat16):  # as training runs it
        got, _ = attend(*half, key_mask, 0.0, need_weights=False, causal=causal)
    assert got.dtype == torch.bfloat16
    got.float().backward(g)
    assert torch.allclose(got.float(), want, atol=0.05, rtol=0.02)
    for h, w in zip(half, grads, strict=True):
        assert torch.allclose(h.grad.float(), w, atol=0.08, rtol=0.05)
    if not causal:  # a masked key gets no gradient: it was not attended
        assert torch.all(half[1].grad[1, :, 9:] == 0) and torch.all(half[2].grad[1, :, 9:] == 0)
    else:  # the last key and value are seen by the last query only
        changed = half[2].detach().clone()
        changed[:, :, 11] = 100.0
        with torch.autocast("cpu", dtype=torch.bfloat16):
            again, _ = attend(half[0].detach(), half[1].detach(), changed, None, 0.0, False, True)
        assert torch.equal(again[:, :, :11], got.detach()[:, :, :11])
        assert not torch.equal(again[:, :, 11], got.detach()[:, :, 11])


def test_bf16_decoding_steps_attend_in_fp32():
    # On a CPU a bf16 decoding step (a few queries a row) attends in fp32, with or without
    # autocast: fp32 attention over the same bf16 values, rounded once at the end, the weights
    # whole and masked. Longer queries (training, an encoder) keep their bf16 products.
    torch.manual_seed(0)
    mask = torch.ones(3, 1, 1, 12, dtype=torch.bool)
    mask[1, ..., 9:] = False
    for tq in (1, SHORT_QUERIES, SHORT_QUERIES + 4):
        q, k, v = (torch.randn(3, 2, n, 16).bfloat16() for n in (tq, 12, 12))
        want, want_weights = attend(q.float(), k.float(), v.float(), mask, 0.0, True)
        for autocast in (False, True):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                got, weights = attend(q, k, v, mask, 0.0, need_weights=True)
            assert got.dtype == torch.bfloat16 and got.shape == (3, 2, tq, 16)
            assert torch.all(weights[1, ..., 9:] == 0)
            assert torch.allclose(weights.float().sum(-1), torch.ones(3, 2, tq), atol=0.02)
            if tq <= SHORT_QUERIES:
                assert torch.equal(got, want.bfloat16())
                assert weights.dtype == torch.float32 and torch.equal(weights, want_weights)
            else:
                assert weights.dtype == torch.bfloat16
                assert torch.allclose(got.float(), want, atol=0.05, rtol=0.02)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_padded_keys_get_zero_attention(norm):
    model = tiny(norm)
    src, tgt = padded_batch()
    maps = model.attention_maps(src, tgt)
    assert len(maps.encoder) == 2 and len(maps.decoder) == 2 and len(maps.cross) == 2
    src_pad = src.eq(PAD)[:, None, None, :]  # (B, 1, 1, S)
    tgt_pad = tgt.eq(PAD)[:, None, None, :]  # (B, 1, 1, T)
    for w in maps.encoder:
        assert w.shape == (3, 2, 7, 7)
        assert torch.all(w.masked_select(src_pad.expand_as(w)) == 0)
        assert torch.allclose(w.sum(-1), torch.ones(3, 2, 7), atol=1e-6)
    for w in maps.cross:
        assert w.shape == (3, 2, 6, 7)
        assert torch.all(w.masked_select(src_pad.expand_as(w)) == 0)
        assert torch.allclose(w.sum(-1), torch.ones(3, 2, 6), atol=1e-6)
    for w in maps.decoder:
        assert w.shape == (3, 2, 6, 6)
        assert torch.all(w.masked_select(tgt_pad.expand_as(w)) == 0)
        assert torch.allclose(w.sum(-1), torch.ones(3, 2, 6), atol=1e-6)


def test_decoder_self_attention_is_causal():
    model = tiny()
    src, tgt = padded_batch()
    for w in model.attention_maps(src, tgt).decoder:
        later = torch.ones(6, 6, dtype=torch.bool).triu(1)  # key j > query i
        assert torch.all(w[..., later] == 0)
        assert torch.all(w[..., 0, 0] == 1)  # the first position sees only itself
        assert torch.all(w[..., ~later][:, :, :3] > 0)  # real earlier keys are attended


def test_future_target_tokens_do_not_change_earlier_logits():
    model = tiny()
    src, tgt = padded_batch()
    tgt = tgt[:1]
    src = src[:1]
    changed = tgt.clone()
    changed[0, 4:] = torch.tensor([5, 6])
    with torch.no_grad():
        a, b = model(src, tgt), model(src, changed)
    assert torch.allclose(a[:, :4], b[:, :4], atol=1e-6)
    assert not torch.allclose(a[:, 4:], b[:, 4:], atol=1e-3)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_extra_source_padding_changes_nothing(norm):
    model = tiny(norm)
    src = random_ids(1, 5)
    src[0, -1] = EOS
    longer = torch.cat([src, torch.full((1, 4), PAD)], dim=1)
    tgt = torch.tensor([[BOS, 7, 8, 9]])
    with torch.no_grad():
        mem, mask, _ = model.encode(src)
        mem_long, mask_long, _ = model.encode(longer)
        assert mem_long.shape == (1, 9, 32) and mask_long.shape == (1, 1, 1, 9)
        assert torch.allclose(mem, mem_long[:, :5], atol=1e-5)
        assert mask_long[0, 0, 0].tolist() == [True] * 5 + [False] * 4
        assert torch.allclose(model(src, tgt), model(longer, tgt), atol=1e-5)


def test_extra_target_padding_changes_nothing():
    model = tiny()
    src = random_ids(1, 5)
    tgt = torch.tensor([[BOS, 7, 8, 9]])
    longer = torch.tensor([[BOS, 7, 8, 9, PAD, PAD]])
    with torch.no_grad():
        assert torch.allclose(model(src, tgt), model(src, longer)[:, :4], atol=1e-5)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_incremental_decoding_matches_full_forward(norm):
    model = tiny(norm)
    src, _ = padded_batch()
    tgt = random_ids(3, 6, seed=5)
    tgt[:, 0] = BOS
    with torch.no_grad():
        full = model(src, tgt)  # (B, T, V)
        memory, mask, _ = model.encode(src)
        state = model.start_state(memory, mask)
        steps = []
        for t in range(tgt.size(1)):
            logits, _ = model.step(tgt[:, t], state)
            assert logits.shape == (3, V)
            steps.append(logits)
        assert state.length == 6
        assert state.caches[0].k.shape == (3, 2, 6, 16)
    assert torch.allclose(torch.stack(steps, 1), full, atol=1e-5)


def test_step_returns_last_layer_cross_attention():
    model = tiny()
    src, _ = padded_batch()
    tgt = torch.tensor([[BOS, 5, 6]] * 3)
    with torch.no_grad():
        cross = model.attention_maps(src, tgt).cross[-1]  # (B, H, T, S)
        memory, mask, _ = model.encode(src)
        state = model.start_state(memory, mask)
        for t in range(3):
            _, w = model.step(tgt[:, t], state, need_weights=True)
            assert w is not None and w.shape == (3, 2, 7)
            assert torch.allclose(w, cross[:, :, t], atol=1e-5)


def test_state_select_reorders_rows():
    model = tiny()
    src, _ = padded_batch()
    with torch.no_grad():
        memory, mask, _ = model.encode(src)
        state = model.start_state(memory, mask)
        model.step(torch.full((3,), BOS), state)
        picked = state.select(torch.tensor([2, 0, 0]))
        assert picked.length == 1
        a, _ = model.step(torch.tensor([5, 6, 7]), picked)
        # The same rows decoded from a fresh state built from the selected sources.
        memory2, mask2, _ = model.encode(src[[2, 0, 0]])
        fresh = model.start_state(memory2, mask2)
        model.step(torch.full((3,), BOS), fresh)
        b, _ = model.step(torch.tensor([5, 6, 7]), fresh)
    assert torch.allclose(a, b, atol=1e-5)


def test_step_layout_holds_the_projection_and_gives_the_same_logits():
    """The encoder keys/values a search steps over are stored as the steps read them (k's
    transpose contiguous, v contiguous), keep that layout when rows are selected, and give
    bit for bit the logits of the projection's own strided views."""
    model = tiny()
    with torch.inference_mode():
        memory, mask, _ = model.encode(random_ids(3, 7))
        state = model.start_state(memory, mask)
        views = [layer.cross_attn.project_memory(memory) for layer in model.decoder]
        plain = DecoderState(mask, views, [SelfCache() for _ in model.decoder])
        assert not views[0][0].transpose(-2, -1).is_contiguous()  # else nothing is tested
        for (k, v), (k0, v0) in zip(state.memory_kv, views):
            assert torch.equal(k, k0) and torch.equal(v, v0)
            assert k.transpose(-2, -1).is_contiguous() and v.is_contiguous()
        tok = torch.full((3,), BOS)
        for _ in range(3):
            a, b = model.step(tok, state)[0], model.step(tok, plain)[0]
            assert torch.equal(a, b)
            tok = a.argmax(-1)
        keep = torch.tensor([2, 0])
        state, plain = state.select(keep), plain.select(keep)
        for (k, v), (k0, v0) in zip(state.memory_kv, plain.memory_kv):
            assert torch.equal(k, k0) and torch.equal(v, v0)
            assert k.transpose(-2, -1).is_contiguous() and v.is_contiguous()
        assert torch.equal(model.step(tok[keep], state)[0], model.step(tok[keep], plain)[0])


def test_off_the_cpu_the_step_layout_keeps_k_contiguous_for_sdpa():
    """Off the CPU the steps run SDPA, whose fused kernels need k's last dimension contiguous:
    the layout there is plain contiguous, and rows selected later keep it. Meta tensors carry
    the strides a GPU's would, with no GPU."""
    model = tiny().to("meta")
    with torch.inference_mode():
        memory = torch.empty(3, 7, 32, device="meta")
        mask = torch.ones(3, 1, 1, 7, dtype=torch.bool, device="meta")
        k0, v0 = model.decoder[0].cross_attn.project_memory(memory)
        assert not k0.is_contiguous()  # the projection's view: else nothing is tested
        k, v = step_layout(k0, v0)
        assert k.is_contiguous() and v.is_contiguous() and k.stride(-1) == 1
        state = model.start_state(memory, mask).select(torch.tensor([2, 0], device="meta"))
        for k, v in state.memory_kv:
            assert k.shape == (2, 2, 7, 16) and k.is_contiguous() and v.is_contiguous()


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_grouped_rows_share_memory_exactly_as_copies_would(norm):
    """K decoder rows per sentence against one memory row (beam search) give the logits and
    cross-attention of K copies of the memory, also after beams move and sentences leave."""
    model = tiny(norm)
    src, _ = padded_batch()
    K = 3
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        memory, mask, _ = model.encode(src)
        grouped = model.start_state(memory, mask, group=K)
        copies = model.start_state(
            memory.repeat_interleave(K, 0), mask.repeat_interleave(K, 0), group=1
        )
        for t in range(4):
            n = grouped.memory_mask.size(0)
            tokens = torch.randint(EOS + 1, V, (n * K,), generator=g)
            a, wa = model.step(tokens, grouped, need_weights=True)
            b, wb = model.step(tokens, copies, need_weights=True)
            assert torch.allclose(a, b, atol=1e-5)
            assert torch.allclose(wa, wb, atol=1e-6)
            if t == 1:  # beams move within their sentence
                perm = torch.tensor([2, 2, 0, 4, 3, 3, 8, 6, 7])
                grouped = grouped.reorder_caches(perm)
                copies = copies.select(perm)
            if t == 2:  # sentence 1 leaves
                rows = torch.tensor([0, 1, 2, 6, 7, 8])
                grouped = grouped.select(rows, torch.tensor([0, 2]))
                copies = copies.select(rows)
    with pytest.raises(ValueError, match="memory_index"):
        grouped.select(torch.tensor([0]))


def test_tied_embeddings_share_storage():
    model = tiny(tie=True)
    assert model.src_embed is model.tgt_embed
    assert model.output.weight.data_ptr() == model.tgt_embed.weight.data_ptr()
    n_tied = sum(p.numel() for p in model.parameters())
    untied = tiny(tie=False)
    assert untied.output.weight.data_ptr() != untied.tgt_embed.weight.data_ptr()
    assert untied.src_embed is not untied.tgt_embed
    assert sum(p.numel() for p in untied.parameters()) == n_tied + 2 * V * 32


def test_tied_output_with_separate_vocabularies():
    model = tiny(tie=True, src_vocab=19, tgt_vocab=V)
    assert model.src_embed.weight.shape == (19, 32)
    assert model.output.weight.data_ptr() == model.tgt_embed.weight.data_ptr()
    assert model(random_ids(2, 4, vocab=19), random_ids(2, 3)).shape == (2, 3, V)


def test_pad_embedding_is_zero():
    model = tiny()
    assert torch.all(model.src_embed.weight[PAD] == 0)


def test_output_shapes():
    model = tiny(tie=False, src_vocab=19, tgt_vocab=V)
    src, tgt = random_ids(4, 9, vocab=19), random_ids(4, 5)
    with torch.no_grad():
        memory, mask, weights = model.encode(src)
        assert memory.shape == (4, 9, 32)
        assert mask.shape == (4, 1, 1, 9) and mask.dtype == torch.bool
        assert weights == []  # only asked-for weights are computed
        assert model(src, tgt).shape == (4, 5, V)


def test_too_long_input_is_refused():
    model = tiny()
    with pytest.raises(ValueError, match="max_positions"):
        model.encode(random_ids(1, 65))


def test_dropout_only_in_training_mode():
    model = tiny()
    src, tgt = padded_batch()
    with torch.no_grad():
        assert torch.equal(model(src, tgt), model(src, tgt))
        model.train()
        assert not torch.allclose(model(src, tgt), model(src, tgt))


def test_bf16_training_computes_its_logits_in_fp32():
    # Under autocast on a CPU the output layer runs in fp32: the logits are exactly fp32's on
    # the same hidden states, not bf16-rounded ones, and gradients reach the tied weights.
    model = tiny().eval()
    hidden = torch.randn(3, 6, 32)
    want = model.project(hidden)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = model.project(hidden)
        logits = model(*padded_batch())
    assert got.dtype == torch.float32 and torch.equal(got, want)
    assert not torch.equal(want.bfloat16().float(), want)  # bf16 would have rounded them
    assert logits.dtype == torch.float32 and logits.shape == (3, 6, V)
    logits.sum().backward()
    assert model.output.weight.grad is not None and model.output.weight.grad.abs().sum() > 0
