"""The SSRU decoder layer (model.decoder_self: ssru): the recurrence it computes, decoding steps
that match the teacher-forced pass, rows reordered as search reorders them, int8, and the
exports that refuse it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from mt.config import DecodeConfig, ModelConfig
from mt.decoder_state import RecurrentCache
from mt.errors import MtError
from mt.export import check_target
from mt.model import Transformer
from mt.runtime.int8 import quantize_linears
from mt.search.beam import beam_search, greedy_search
from mt.ssru import SSRU
from mt.tokenizer import BOS, EOS, PAD

V = 23


def ssru_model(norm: str = "post") -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig(
        d_model=32, n_heads=2, d_ff=64, encoder_layers=2, decoder_layers=2, dropout=0.1,
        norm=norm, max_positions=64, decoder_self="ssru",
    )  # fmt: skip
    return Transformer(cfg, V, V).eval()


def ids(rows: int, length: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(EOS + 1, V, (rows, length), generator=g)


def test_the_unit_computes_the_gated_running_average():
    torch.manual_seed(3)
    unit = SSRU(8)
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        y, w = unit(x)
        W, Wf = unit.proj.weight[:8], unit.proj.weight[8:]
        b, bf = unit.proj.bias[:8], unit.proj.bias[8:]
        c = torch.zeros(2, 8)
        for t in range(5):
            f = torch.sigmoid(x[:, t] @ Wf.T + bf)
            c = f * c + (1 - f) * (x[:, t] @ W.T + b)
            assert torch.allclose(y[:, t], torch.relu(c), atol=1e-6)
    assert w is None and y.shape == (2, 5, 8)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_decoding_steps_match_the_teacher_forced_pass(norm):
    model = ssru_model(norm)
    src, tgt = ids(3, 7, 1), ids(3, 6, 2)
    tgt[:, 0] = BOS
    with torch.no_grad():
        full = model(src, tgt)
        state = model.start_state(*model.encode(src)[:2])
        steps = [model.step(tgt[:, t], state)[0] for t in range(6)]
    assert all(isinstance(c, RecurrentCache) and c.c.shape == (3, 32) for c in state.caches)
    assert torch.allclose(torch.stack(steps, 1), full, atol=1e-5)


def test_later_tokens_and_padding_leave_earlier_positions_alone():
    model = ssru_model()
    src, tgt = ids(1, 5, 1), ids(1, 6, 2)
    tgt[0, 0] = BOS
    changed, padded = tgt.clone(), torch.cat([tgt, torch.full((1, 3), PAD)], 1)
    changed[0, 4:] = torch.tensor([5, 6])
    with torch.no_grad():
        a, b, c = model(src, tgt), model(src, changed), model(src, padded)
    assert torch.allclose(a[:, :4], b[:, :4], atol=1e-6)
    assert not torch.allclose(a[:, 4:], b[:, 4:], atol=1e-3)
    assert torch.allclose(a, c[:, :6], atol=1e-6)


def test_selected_rows_go_on_as_a_fresh_state_of_those_rows():
    model = ssru_model()
    src = ids(3, 7, 1)
    with torch.no_grad():
        state = model.start_state(*model.encode(src)[:2])
        model.step(torch.full((3,), BOS), state)
        model.step(torch.tensor([5, 6, 7]), state)
        picked = state.select(torch.tensor([2, 0, 0]))
        a, _ = model.step(torch.tensor([8, 9, 10]), picked)
        fresh = model.start_state(*model.encode(src[[2, 0, 0]])[:2])
        model.step(torch.full((3,), BOS), fresh)
        model.step(torch.tensor([7, 5, 5]), fresh)
        b, _ = model.step(torch.tensor([8, 9, 10]), fresh)
    assert torch.allclose(a, b, atol=1e-5)


def test_attention_maps_hold_the_cross_attention_alone():
    model = ssru_model()
    src, tgt = ids(2, 5, 1), ids(2, 4, 2)
    maps = model.attention_maps(src, tgt)
    assert maps.decoder == [] and len(maps.cross) == 2 and len(maps.encoder) == 2


def test_searches_and_int8_decode_it():
    """Beam 1 is greedy search, batched or not; int8 quantises the unit's product too."""
    model = ssru_model()
    src = ids(4, 6, 1)
    cfg = DecodeConfig(beam=1, max_len_a=1.0, max_len_b=5)
    greedy = [h.tokens for h in greedy_search(model, src, cfg)]
    beam1 = [h[0].tokens for h in beam_search(model, src, cfg)]
    alone = [greedy_search(model, src[i : i + 1], cfg)[0].tokens for i in range(4)]
    assert greedy == beam1 == alone
    q = quantize_linears(model)
    assert type(q.decoder[0].self_attn.proj).__module__.startswith("torch.ao.nn.quantized")
    assert len(greedy_search(q, src, cfg)) == 4


@pytest.mark.parametrize("target", ["ctranslate2", "marian"])
def test_exports_refuse_it_in_one_line(target):
    loaded = SimpleNamespace(cfg=SimpleNamespace(model=ModelConfig(decoder_self="ssru")))
    with pytest.raises(MtError, match=f"--to {target}: .*SSRU.*model.decoder_self"):
        check_target(loaded, target)  # type: ignore[arg-type]
