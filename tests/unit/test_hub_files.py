"""Reading an HF model's weights for `mt import`: the safetensors reader and the mapping that
takes each original out as it is used (what keeps the import's peak memory low)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mt.config import ModelConfig
from mt.errors import MtError
from mt.hub.files import _safetensors
from mt.hub.layers import map_layers, vocab_order
from mt.hub.marian import embeddings

safetensors_torch = pytest.importorskip("safetensors.torch")


def test_reader_gives_what_safetensors_wrote(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    tensors = {
        "f32": torch.randn(5, 3, generator=g),
        "bf16": torch.randn(4, 2, generator=g).bfloat16(),
        "f16": torch.randn(7, generator=g).half(),
        "i64": torch.arange(6).view(2, 3),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 4),
        "flags": torch.tensor([True, False, True]),
    }
    path = tmp_path / "model.safetensors"
    safetensors_torch.save_file(tensors, str(path), metadata={"format": "pt"})
    got = _safetensors(path)
    assert got.keys() == tensors.keys()
    for name, t in tensors.items():
        assert got[name].dtype == t.dtype and got[name].shape == t.shape
        assert torch.equal(got[name], t)
    got["f32"].add_(1)  # each tensor owns its memory: writing one leaves the others
    assert torch.equal(got["bf16"], tensors["bf16"])


@pytest.mark.parametrize("cut", ["truncated", "huge shape", "bad dtype", "no header"])
def test_reader_refuses_a_broken_file_in_one_line(tmp_path: Path, cut: str) -> None:
    path = tmp_path / "model.safetensors"
    safetensors_torch.save_file({"w": torch.randn(64, 64)}, str(path))
    data = path.read_bytes()
    if cut == "truncated":
        data = data[: len(data) - 100]
    elif cut == "huge shape":  # refused before anything is allocated
        info = {"w": {"dtype": "F32", "shape": [10**12, 64], "data_offsets": [0, 16]}}
        header = json.dumps(info).encode()
        data = len(header).to_bytes(8, "little") + header + bytes(16)
    elif cut == "bad dtype":
        data = data.replace(b'"F32"', b'"X32"', 1)
    else:
        data = b"\xff" * 16
    path.write_bytes(data)
    with pytest.raises(MtError, match=r"model\.safetensors: not readable safetensors"):
        _safetensors(path)


def test_mapping_takes_the_weights_it_uses() -> None:
    """Every layer weight and table is taken out of the dictionary as it is mapped (so its
    original is freed once fused or reordered); a tied table is reordered once and shared."""
    m = ModelConfig(d_model=8, n_heads=2, d_ff=16, encoder_layers=1, decoder_layers=1)
    g = torch.Generator().manual_seed(0)
    w: dict[str, torch.Tensor] = {}
    for side, attns in (("encoder", ("self_attn",)), ("decoder", ("self_attn", "encoder_attn"))):
        s = f"model.{side}.layers.0"
        for attn in attns:
            for p in ("q", "k", "v", "out"):
                w[f"{s}.{attn}.{p}_proj.weight"] = torch.randn(8, 8, generator=g)
                w[f"{s}.{attn}.{p}_proj.bias"] = torch.randn(8, generator=g)
            w[f"{s}.{attn}_layer_norm.weight"] = torch.ones(8)
            w[f"{s}.{attn}_layer_norm.bias"] = torch.zeros(8)
        w[f"{s}.fc1.weight"], w[f"{s}.fc1.bias"] = torch.randn(16, 8), torch.randn(16)
        w[f"{s}.fc2.weight"], w[f"{s}.fc2.bias"] = torch.randn(8, 16), torch.randn(8)
        w[f"{s}.final_layer_norm.weight"] = torch.ones(8)
        w[f"{s}.final_layer_norm.bias"] = torch.zeros(8)
    table = torch.randn(6, 8, generator=g)
    w["model.shared.weight"] = table
    w["final_logits_bias"] = torch.randn(1, 6, generator=g)
    q = "model.encoder.layers.0.self_attn"
    fused = torch.cat([w[f"{q}.{p}_proj.weight"] for p in "qkv"])
    sd = map_layers(w, m)
    assert torch.equal(sd["encoder.0.attn.qkv.weight"], fused)
    assert set(w) == {"model.shared.weight", "final_logits_bias"}
    order = vocab_order({f"p{i}": i for i in range(6)} | {"<unk>": 1}, 6, pad=5, unk=1, eos=0)
    out = embeddings(w, m, order, order, start=5)
    assert w == {}
    assert out["tgt_embed.weight"] is out["src_embed.weight"] is out["output.weight"]
    assert torch.equal(out["src_embed.weight"][0], table[5])  # mt's PAD row is the model's pad
    assert torch.equal(out["src_embed.weight"][2], table[5])  # BOS: the decoder start row
    assert torch.equal(out["src_embed.weight"][4:], table[[2, 3, 4]])
