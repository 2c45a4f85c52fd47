"""LoRA's arithmetic on a small random Transformer (mt/adapt/lora.py, mt/adapt/files.py): a
fresh adapter changes nothing, a trained one is B A scaled on exactly the outputs it wraps,
folding it in computes the same, only its tensors train, and the base's fingerprint tells
bases apart."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mt.adapt.files import fingerprint
from mt.adapt.lora import (
    TARGETS,
    LoraLinear,
    LoraSpec,
    LoraTable,
    adapter_state,
    attach,
    fold,
    load_adapter_state,
    with_adapter,
    wrap,
)
from mt.config import ModelConfig
from mt.model import Transformer
from mt.runtime.int8 import quantize_linears

CFG = ModelConfig(d_model=32, n_heads=4, d_ff=64, encoder_layers=2, decoder_layers=2)
SRC = torch.tensor([[5, 17, 33, 8, 2], [9, 44, 2, 0, 0]])
TGT = torch.tensor([[1, 5, 6, 7, 9], [1, 8, 9, 0, 0]])


def model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(CFG, 60, 60).eval()


def randomised(net: torch.nn.Module, seed: int = 1) -> torch.nn.Module:
    """`net` with every adapter's B drawn at random, as after training."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, LoraLinear | LoraTable):
                m.lora_b.copy_(torch.randn(m.lora_b.shape, generator=g) * 0.1)
    return net


def test_a_fresh_adapter_changes_no_output():
    base = model()
    adapted = model()
    wrapped = wrap(adapted, LoraSpec(rank=4, targets=TARGETS))
    assert len(wrapped) == 2 * 4 + 2 * 7  # encoder: qkv out fc1 fc2; decoder: + q kv out
    with torch.no_grad():
        assert torch.equal(adapted(SRC, TGT), base(SRC, TGT))


def test_the_update_is_b_a_scaled_on_the_wrapped_outputs_only():
    """q and v of a fused qkv wrapped: k's rows are the base's to the bit; q's and v's are
    x W^T + b + alpha/r B A x, computed by hand."""
    spec = LoraSpec(rank=3, alpha=6.0, targets=("q", "v"))
    layer = model().encoder[0].attn.qkv
    lora = randomised(LoraLinear(layer, 3, (0, 2), spec))
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        y, base = lora(x), layer(x)
        d = 32
        assert torch.equal(y[..., d : 2 * d], base[..., d : 2 * d])
        for s, slot in enumerate((0, 2)):
            a = lora.lora_a[s * 3 : (s + 1) * 3]  # (r, in)
            b = lora.lora_b[s]  # (width, r)
            expected = base[..., slot * d : (slot + 1) * d] + 2.0 * x @ a.T @ b.T
            torch.testing.assert_close(y[..., slot * d : (slot + 1) * d], expected)


def test_folding_computes_what_the_wrapped_model_computes():
    for targets in (TARGETS, ("v",), ("k", "ffn"), ("embed",), (*TARGETS, "embed")):
        spec = LoraSpec(rank=4, alpha=8.0, targets=targets)
        net = model()
        wrap(net, spec)
        randomised(net)
        with torch.no_grad():
            unmerged = net(SRC, TGT)
            merged = fold(net)(SRC, TGT)
        assert not any(isinstance(m, LoraLinear | LoraTable) for m in net.modules())
        torch.testing.assert_close(merged, unmerged, rtol=1e-5, atol=1e-5, msg=str(targets))
        # the folded model is the base's shape: one table, the output layer tied to it
        assert net.output.weight is net.tgt_embed.weight is net.src_embed.weight
        assert sum(p.numel() for p in net.parameters()) == sum(
            p.numel() for p in model().parameters()
        )


def test_the_table_update_is_b_a_scaled_in_lookups_and_logits():
    """With "embed", a piece's vector is E[id] + alpha/r B[id] A and the tied output layer's
    logits are h (E + alpha/r B A)^T: one update, shared."""
    spec = LoraSpec(rank=3, alpha=6.0, targets=("embed",))
    net = model()
    base = net.src_embed
    wrapped = wrap(net, spec)
    randomised(net)
    table = net.src_embed
    assert isinstance(table, LoraTable) and net.tgt_embed is table and len(wrapped) == 2
    assert net.output.lora_a is table.lora_a and net.output.lora_b is table.lora_b
    ids = torch.tensor([[0, 5, 59]])
    a, b = table.lora_a.detach(), table.lora_b.detach()[0]
    with torch.no_grad():
        expected = base.weight[ids] + 2.0 * b[ids] @ a
        torch.testing.assert_close(table(ids), expected)
        h = torch.randn(4, 32)
        full = base.weight + 2.0 * b @ a
        torch.testing.assert_close(net.output(h), h @ full.T, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(net.output.weight, full)


def test_only_the_adapter_trains():
    net = model().train()
    n = attach(net, LoraSpec(rank=2, dropout=0.1, targets=TARGETS))
    trainable = {k for k, p in net.named_parameters() if p.requires_grad}
    assert trainable and all(k.endswith(("lora_a", "lora_b")) for k in trainable)
    assert n == sum(p.numel() for p in net.parameters() if p.requires_grad)
    # rank r on a fused projection of S outputs: S * r * (in + width) values
    d, f = 32, 64
    per_encoder = 3 * 2 * (d + d) + 2 * (d + d) + 2 * (d + f) + 2 * (f + d)
    per_decoder = per_encoder + 2 * (d + d) + 2 * 2 * (d + d) + 2 * (d + d)
    assert n == 2 * per_encoder + 2 * per_decoder
    tables = model().train()
    # the shared table and tied output: one A (r, D) and one B (V, r), counted once
    assert attach(tables, LoraSpec(rank=2, targets=("embed",))) == 2 * (32 + 60)
    net(SRC, TGT).logsumexp(-1).sum().backward()
    for name, p in net.named_parameters():
        if name.endswith("lora_a"):
            assert p.grad is None or not p.grad.any(), name  # B is zero: A gets no gradient yet
        elif name.endswith("lora_b"):
            assert p.grad is not None and p.grad.abs().sum() > 0, name
        else:
            assert p.grad is None, name


@pytest.mark.parametrize("targets", [TARGETS, (*TARGETS, "embed")])
def test_adapter_state_round_trips_and_a_misfit_is_named(targets):
    spec = LoraSpec(rank=4, targets=targets)
    trained = randomised(model())
    wrap(trained, spec)
    randomised(trained)
    state = adapter_state(trained)
    assert state and all(k.endswith(("lora_a", "lora_b")) for k in state)
    assert not any(k.startswith(("tgt_embed.", "output.")) for k in state)  # shared: named once
    base = model()
    adapted = with_adapter(base, spec, state)
    with torch.no_grad():
        torch.testing.assert_close(adapted(SRC, TGT), trained(SRC, TGT))
    # the copy shares the base's weights: several adapters cost one base
    own = {id(p) for p in base.parameters()}
    shared = [p for k, p in adapted.named_parameters() if "lora" not in k]
    assert all(id(p) in own for p in shared)
    with pytest.raises(ValueError, match="lacks"):
        load_adapter_state(adapted, {k: v for k, v in state.items() if "decoder" not in k})
    with pytest.raises(ValueError, match="rank|is \\("):
        with_adapter(base, dataclasses.replace(spec, rank=2), state)


@pytest.mark.parametrize("targets", [TARGETS, (*TARGETS, "embed")])
def test_int8_decodes_an_unmerged_adapter_close_to_fp32(targets):
    """int8 on the wrapped model: the bases of wrapped layers are quantised, the updates stay
    fp32 beside them; the logits stay as close to fp32 as the base's int8 ones do."""
    base = model()
    spec = LoraSpec(rank=4, targets=targets)
    trained = model()
    wrap(trained, spec)
    state = adapter_state(randomised(trained))
    adapted = with_adapter(base, spec, state)
    q = quantize_linears(adapted)
    wrapped = [m for m in q.modules() if isinstance(m, LoraLinear)]
    assert wrapped and all(type(m.base) is not torch.nn.Linear for m in wrapped)
    with torch.no_grad():
        ref, got = adapted(SRC, TGT), q(SRC, TGT)
        base_gap = (quantize_linears(base)(SRC, TGT) - base(SRC, TGT)).abs().max()
    assert (got - ref).abs().max() < 3 * base_gap + 1e-3


def test_the_fingerprint_tells_bases_apart_but_not_their_dropout():
    a, b = model(0).state_dict(), model(1).state_dict()
    shape = dataclasses.asdict(CFG)
    assert fingerprint(a, shape) == fingerprint(dict(a), shape)
    assert fingerprint(a, shape) != fingerprint(b, shape)
    nudged = {**a, "decoder.1.ffn.fc2.bias": a["decoder.1.ffn.fc2.bias"] + 1e-7}
    assert fingerprint(nudged, shape) != fingerprint(a, shape)
    assert fingerprint(a, {**shape, "dropout": 0.3}) == fingerprint(a, shape)
    assert fingerprint(a, {**shape, "norm": "pre"}) != fingerprint(a, shape)


@pytest.mark.parametrize("tie_output", [True, False])
def test_untied_tables_each_get_an_update_and_fold_back_to_their_shape(tie_output):
    """Source and target tables apart (as an imported model may have them): each is wrapped;
    an output layer tied to the target table shares its update, an untied one has its own,
    and folding gives the base's parameters back, tied where they were."""
    torch.manual_seed(0)
    shape = dataclasses.replace(CFG, tie_embeddings=False, tie_output=tie_output)
    net = Transformer(shape, 60, 50).eval()
    size = sum(p.numel() for p in net.parameters())
    spec = LoraSpec(rank=2, alpha=4.0, targets=("embed",))
    attach(net, spec)
    assert isinstance(net.src_embed, LoraTable) and net.src_embed is not net.tgt_embed
    assert (net.output.lora_a is net.tgt_embed.lora_a) is tie_output
    randomised(net)
    with torch.no_grad():
        unmerged = net(SRC, TGT)
        merged = fold(net)(SRC, TGT)
    torch.testing.assert_close(merged, unmerged, rtol=1e-5, atol=1e-5)
    assert (net.output.weight is net.tgt_embed.weight) is tie_output
    assert sum(p.numel() for p in net.parameters()) == size
