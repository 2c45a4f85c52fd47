"""`decode.gemm`: CPU decoding's products through oneDNN (mt/runtime/onednn.py): fp32's output
layer, and every Linear layer of bf16's half copy on packed weights.

The oneDNN layers compute what `F.linear` computes (to float rounding) for every row count,
the fp32 copy shares the caller's weights and neither copy changes the caller's model, the
setting reaches the translator's model, and where it cannot apply a given `onednn` is one
line."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mt.config import ModelConfig
from mt.data.corpus import read_lines
from mt.device import Precision
from mt.errors import MtError
from mt.model import Transformer, applied
from mt.runtime import onednn
from mt.runtime.dtype import decode_model, uses_onednn
from mt.runtime.int8 import quantize_linears
from mt.search.ensemble import Ensemble
from mt.translation.requests import Plan, Request
from mt.translation.session import DecodeOptions, Session

pytestmark = pytest.mark.skipif(not onednn.available(), reason="this torch lacks the oneDNN op")

CPU = torch.device("cpu")
FP32 = Precision("fp32", "test")
BF16 = Precision("bf16", "test")


def small_model(seed: int = 0, logits_bias: bool = True) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(
        d_model=32, n_heads=2, d_ff=64, encoder_layers=1, decoder_layers=2, logits_bias=logits_bias
    )
    model = Transformer(cfg, 50, 60).eval()
    if logits_bias:
        model.output_bias.normal_()  # a bias that shows if it is lost or added twice
    return model


@pytest.mark.parametrize("rows", [1, 7, 8, 13, 256, 300, 600])
def test_the_onednn_layer_computes_linear_for_any_row_count(rows):
    """Padded rows (not a multiple of 8) and calls split at MAX_ROWS give F.linear's values,
    in 2-D and 3-D, with and without a bias."""
    torch.manual_seed(rows)
    weight, bias = torch.randn(70, 24), torch.randn(70)
    x = torch.randn(rows, 24)
    for b in (bias, None):
        got = onednn.OneDnnLinear(weight, b)(x)
        assert got.shape == (rows, 70)
        torch.testing.assert_close(got, F.linear(x, weight, b), rtol=1e-5, atol=1e-5)
    x3 = x.view(1, rows, 24)
    got3 = onednn.OneDnnLinear(weight, bias)(x3)
    torch.testing.assert_close(got3, F.linear(x3, weight, bias), rtol=1e-5, atol=1e-5)


def test_the_copy_shares_the_weights_folds_the_bias_and_leaves_the_model_alone():
    model = small_model().train()
    fast = onednn.onednn_output(model)
    assert isinstance(fast.output, onednn.OneDnnLinear) and fast.output_bias is None
    assert type(model.output) is nn.Linear and model.output_bias is not None and model.training
    assert not fast.training
    mine = {p.data_ptr() for p in model.parameters()}
    assert {p.data_ptr() for p in fast.parameters()} <= mine  # no weight copied
    assert fast.output.bias is model.output_bias
    hidden = torch.randn(5, 32)
    with torch.no_grad():
        torch.testing.assert_close(fast.project(hidden), model.project(hidden))


def test_an_ensemble_gets_a_onednn_output_layer_in_every_member():
    members = [small_model(0), small_model(1)]
    ensemble = Ensemble(members).eval()
    fast = onednn.onednn_output(ensemble)
    assert all(isinstance(m.output, onednn.OneDnnLinear) for m in fast.members)
    assert all(type(m.output) is nn.Linear for m in ensemble.members)
    hidden = torch.randn(3, 64)
    with torch.no_grad():
        torch.testing.assert_close(fast.project(hidden), ensemble.project(hidden))


@pytest.mark.filterwarnings("ignore:.*deprecated:DeprecationWarning")
def test_int8_takes_onednns_kernels_only_when_asked():
    """Under int8, onednn packs the quantised layers for oneDNN; auto and torch keep torch's
    default engine (the faster where measured)."""
    model = small_model().eval()
    src, tgt = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 10, 11]])
    with torch.no_grad():
        want = {e: quantize_linears(model, e)(src, tgt) for e in ("torch", "onednn")}
        for gemm, engine in (("onednn", "onednn"), ("auto", "torch"), ("torch", "torch")):
            got = decode_model(model, FP32, CPU, True, gemm)(src, tgt)
            torch.testing.assert_close(got, want[engine], rtol=0, atol=0)


def test_decode_model_applies_gemm_only_to_fp32_on_a_cpu_without_int8():
    model = small_model()
    assert isinstance(decode_model(model, FP32, CPU, False, "auto").output, onednn.OneDnnLinear)
    assert isinstance(decode_model(model, FP32, CPU, False, "onednn").output, onednn.OneDnnLinear)
    assert decode_model(model, FP32, CPU, False, "torch") is model
    assert decode_model(model, FP32, CPU, False) is model  # the scorer's call
    assert decode_model(model, FP32, torch.device("cuda"), False, "auto") is model
    assert not uses_onednn("auto", FP32, CPU, True)
    assert not uses_onednn("auto", BF16, CPU, True)
    assert not uses_onednn("auto", BF16, torch.device("cuda"), False)
    assert uses_onednn("auto", BF16, CPU, False) == onednn.bf16_available()
    assert type(decode_model(model, BF16, CPU, False, "torch").output) is nn.Linear


needs_bf16 = pytest.mark.skipif(
    not onednn.bf16_available(), reason="this torch or CPU lacks oneDNN's bf16 products"
)


@needs_bf16
@pytest.mark.parametrize("rows", [1, 5, 8, 13, 256, 300])
def test_the_packed_bf16_layer_computes_linear_for_any_row_count(rows):
    """A packed weight gives bf16 F.linear's values (to bf16 rounding) for padded and split row
    counts, in 2-D and 3-D, with and without a bias; the weight is held only packed."""
    torch.manual_seed(rows)
    weight, bias = torch.randn(70, 24).bfloat16(), torch.randn(70).bfloat16()
    x = torch.randn(rows, 24).bfloat16()
    for b in (bias, None):
        layer = onednn.PackedLinear(weight, b)
        got = layer(x)
        assert got.shape == (rows, 70) and got.dtype == torch.bfloat16
        want = F.linear(x.float(), weight.float(), None if b is None else b.float())
        torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=5e-2)
        assert not hasattr(layer, "weight")
    x3 = x.view(1, rows, 24)
    want3 = F.linear(x3.float(), weight.float(), bias.float())
    got3 = onednn.PackedLinear(weight, bias)(x3)
    torch.testing.assert_close(got3.float(), want3, rtol=2e-2, atol=5e-2)


@needs_bf16
def test_the_packed_layer_applies_a_relu_inside_its_product_exactly():
    """`post` "relu" gives the plain packed layer's values with the ReLU applied after them,
    bit for bit, and the bf16 copy's feed-forward layers use it."""
    torch.manual_seed(3)
    weight, bias = torch.randn(64, 24).bfloat16(), torch.randn(64).bfloat16()
    x = torch.randn(2, 13, 24).bfloat16()
    plain = onednn.PackedLinear(weight, bias)(x)
    fused = onednn.PackedLinear(weight, bias, post="relu")(x)
    assert fused.min() == 0 and plain.min() < 0
    assert torch.equal(fused, plain.relu())
    fast = decode_model(small_model(), BF16, CPU, False, "auto")
    for layer in [*fast.encoder, *fast.decoder]:
        assert layer.ffn.fc1.post == "relu" and layer.ffn.activation is applied
        assert layer.ffn.fc2.post == "none"


@needs_bf16
def test_the_bf16_copy_packs_every_linear_layer_and_leaves_the_model_alone():
    model = small_model().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fast = decode_model(model, BF16, CPU, False, "auto")
    assert not fast.training and model.training
    assert not any(type(m) is nn.Linear for m in fast.modules())
    packed = [m for m in fast.modules() if isinstance(m, onednn.PackedLinear)]
    # the output layer; an encoder layer's qkv, out, fc1, fc2; a decoder layer's and q, kv, out
    assert len(packed) == 1 + 4 * 1 + 7 * 2
    assert fast.output_bias is None and fast.output.bias is not None
    assert all(p.dtype == torch.bfloat16 for p in fast.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    plain = decode_model(model, BF16, CPU, False, "torch")
    src = torch.randint(4, 50, (3, 7))
    with torch.no_grad():
        want, got = plain.encode(src)[0], fast.encode(src)[0]
        torch.testing.assert_close(got.float(), want.float(), rtol=5e-2, atol=5e-2)
        hidden = torch.randn(5, 32).bfloat16()
        torch.testing.assert_close(
            fast.project(hidden).float(), plain.project(hidden).float(), rtol=5e-2, atol=1e-1
        )


@needs_bf16
def test_bf16_through_onednn_translates_as_the_plain_half_copy(tiny_run, multi30k_dir):
    """The packed copy and torch's bf16 products give the same lines bar bf16 near-ties."""
    session = Session([tiny_run / "best.pt"], "cpu")
    lines = read_lines(multi30k_dir / "test_2016_flickr.de.gz")[:40]
    plan = Plan(protect=False, recase=False)
    out = {}
    for gemm in ("torch", "onednn"):
        translator = session.translator(DecodeOptions(gemm=gemm, dtype="bf16", beam=3))
        packed = isinstance(translator.model.output, onednn.PackedLinear)
        assert packed == (gemm == "onednn")
        out[gemm] = [t.text for t in translator.translate([Request(x, plan=plan) for x in lines])]
    same = sum(a == b for a, b in zip(out["torch"], out["onednn"]))
    assert same >= 0.8 * len(lines), f"{same}/{len(lines)} identical"


def test_the_setting_reaches_the_translator_and_outputs_stay_close(tiny_run, multi30k_dir):
    """Same lines from both multiplies (bar float near-ties, which the 60-step model has many
    of), scores within 1e-4; `torch` decodes with the session's own model."""
    session = Session([tiny_run / "best.pt"], "cpu")
    lines = read_lines(multi30k_dir / "test_2016_flickr.de.gz")[:40]
    plan = Plan(protect=False, recase=False)
    out = {}
    for gemm in ("torch", "onednn"):
        translator = session.translator(DecodeOptions(gemm=gemm, beam=3), with_scores=True)
        if gemm == "torch":
            assert translator.model is session.model
        else:
            assert isinstance(translator.model.output, onednn.OneDnnLinear)
        out[gemm] = translator.translate([Request(x, plan=plan) for x in lines])
    auto = session.translator(DecodeOptions(greedy=True))
    assert isinstance(auto.model.output, onednn.OneDnnLinear)  # the default on a CPU
    same = [i for i in range(len(lines)) if out["torch"][i].text == out["onednn"][i].text]
    assert len(same) >= 0.9 * len(lines), f"{len(same)}/{len(lines)} identical"
    for i in same:
        a, b = out["torch"][i].hypotheses[0].score, out["onednn"][i].hypotheses[0].score
        assert abs(a - b) <= 1e-4 * max(1.0, abs(a)), (i, a, b)


def test_onednn_where_it_cannot_apply_is_one_line(tiny_run, monkeypatch):
    session = Session([tiny_run / "best.pt"], "cpu")
    assert session.decode_config(DecodeOptions(gemm="onednn", int8=True)).gemm == "onednn"
    monkeypatch.setattr("mt.translation.session.engine_available", lambda engine: False)
    with pytest.raises(MtError, match=r"--gemm onednn with --int8: torch .* no oneDNN int8"):
        session.decode_config(DecodeOptions(gemm="onednn", int8=True))
    monkeypatch.undo()
    if onednn.bf16_available():
        assert session.decode_config(DecodeOptions(gemm="onednn", dtype="bf16")).gemm == "onednn"
    else:
        with pytest.raises(MtError, match=r"lacks the oneDNN bf16 ops"):
            session.decode_config(DecodeOptions(gemm="onednn", dtype="bf16"))
    assert session.decode_config(DecodeOptions(gemm="auto", int8=True)).gemm == "auto"


def test_the_gemm_flag_of_translate(tiny_run, multi30k_dir, mt_cli, tmp_path):
    src = tmp_path / "in.de"
    src.write_text("\n".join(read_lines(multi30k_dir / "test_2016_flickr.de.gz")[:5]) + "\n")
    ckpt = tiny_run / "best.pt"
    outs = []
    for gemm in ("torch", "onednn"):
        result = mt_cli("translate", ckpt, "--input", src, "--greedy", "--gemm", gemm)
        assert result.rc == 0, result.err
        outs.append(result.out.splitlines())
    assert len(outs[0]) == len(outs[1]) == 5
    int8 = {}
    for gemm in ("torch", "onednn"):
        result = mt_cli("translate", ckpt, "--input", src, "--greedy", "--gemm", gemm, "--int8")
        assert result.rc == 0, result.err
        int8[gemm] = result.out.splitlines()
    assert len(int8["torch"]) == len(int8["onednn"]) == 5


def test_the_probe_leaves_the_global_rng_alone():
    """Training's evaluation builds a translator (so probes oneDNN) between training steps: a
    draw from the global RNG there would change every later dropout mask."""
    torch.manual_seed(0)
    want = torch.rand(3)
    torch.manual_seed(0)
    assert onednn.available.__wrapped__()
    assert torch.equal(torch.rand(3), want)
