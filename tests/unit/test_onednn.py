"""`decode.gemm`: the output layer of CPU fp32 decoding through oneDNN (mt/decode/onednn.py).

The oneDNN layer computes what `F.linear` computes (to float rounding) for every row count,
the copy shares the caller's weights and leaves its model alone, the setting reaches the
translator's model, and where it cannot apply a given `onednn` is one line."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mt.config import ModelConfig
from mt.data.corpus import read_lines
from mt.decode import onednn
from mt.decode.dtype import decode_model, uses_onednn
from mt.decode.ensemble import Ensemble
from mt.decode.requests import Plan, Request
from mt.decode.session import DecodeOptions, Session
from mt.device import Precision
from mt.errors import MtError
from mt.model import Transformer

pytestmark = pytest.mark.skipif(not onednn.available(), reason="this torch lacks the oneDNN op")

CPU = torch.device("cpu")
FP32 = Precision("fp32", "test")


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


def test_decode_model_applies_gemm_only_to_fp32_on_a_cpu_without_int8():
    model = small_model()
    assert isinstance(decode_model(model, FP32, CPU, False, "auto").output, onednn.OneDnnLinear)
    assert isinstance(decode_model(model, FP32, CPU, False, "onednn").output, onednn.OneDnnLinear)
    assert decode_model(model, FP32, CPU, False, "torch") is model
    assert decode_model(model, FP32, CPU, False) is model  # the scorer's call
    assert decode_model(model, FP32, torch.device("cuda"), False, "auto") is model
    assert not uses_onednn("auto", Precision("bf16", "test"), CPU, False)  # autocast's matmuls
    assert not uses_onednn("auto", FP32, CPU, True)


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


def test_onednn_where_it_cannot_apply_is_one_line(tiny_run):
    session = Session([tiny_run / "best.pt"], "cpu")
    with pytest.raises(MtError, match=r"--gemm onednn decodes fp32 on a CPU, but --int8 is on"):
        session.decode_config(DecodeOptions(gemm="onednn", int8=True))
    with pytest.raises(MtError, match=r"this decode is bf16 on cpu"):
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
    bad = mt_cli("translate", ckpt, "--input", src, "--gemm", "onednn", "--int8")
    assert bad.rc == 2 and "--gemm onednn" in bad.err and "Traceback" not in bad.err


def test_the_probe_leaves_the_global_rng_alone():
    """Training's evaluation builds a translator (so probes oneDNN) between training steps: a
    draw from the global RNG there would change every later dropout mask."""
    torch.manual_seed(0)
    want = torch.rand(3)
    torch.manual_seed(0)
    assert onednn.available.__wrapped__()
    assert torch.equal(torch.rand(3), want)
