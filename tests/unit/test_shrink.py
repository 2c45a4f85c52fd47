"""`train.init_shrink`'s choices (mt/train/shrink.py): which layers a smaller model keeps, how
the checkpoint's weights are renamed for it, and the layer counts it may and may not ask for."""

from __future__ import annotations

import pytest
import torch

from mt.config import ModelConfig
from mt.errors import MtError
from mt.model import Transformer
from mt.train.shrink import shrink, spaced

TEACHER = ModelConfig(d_model=32, n_heads=4, d_ff=64, encoder_layers=3, decoder_layers=6)


@pytest.mark.parametrize(
    ("kept", "of", "layers"),
    [(1, 3, [0]), (2, 3, [0, 2]), (3, 3, [0, 1, 2]), (2, 6, [0, 5]), (3, 6, [0, 2, 5]),
     (4, 6, [0, 2, 3, 5]), (6, 6, [0, 1, 2, 3, 4, 5])],
)  # fmt: skip
def test_the_kept_layers_are_spread_from_the_first_to_the_last(kept, of, layers):
    assert spaced(kept, of) == layers


def test_the_smaller_model_loads_the_kept_layers_and_everything_else():
    torch.manual_seed(0)
    teacher = Transformer(TEACHER, 50, 50)
    asked = ModelConfig(encoder_layers=3, decoder_layers=2)  # d_model etc. left at defaults
    model, weights, line = shrink(asked, TEACHER, teacher.state_dict(), "t.pt")
    assert (model.encoder_layers, model.decoder_layers, model.d_model) == (3, 2, 32)
    assert "decoder layers [0, 5] of its 6" in line and "encoder layers [0, 1, 2] of its 3" in line
    student = Transformer(model, 50, 50)
    student.load_state_dict(weights)  # every key of the smaller model, nothing more
    sd, td = student.state_dict(), teacher.state_dict()
    for name, value in sd.items():
        source = name.replace("decoder.1.", "decoder.5.") if name.startswith("decoder.1.") else name
        assert torch.equal(value, td[source]), name


def test_a_default_count_keeps_the_checkpoints_and_more_layers_are_refused():
    model, _, _ = shrink(ModelConfig(decoder_layers=1), TEACHER, {}, "t.pt")
    assert (model.encoder_layers, model.decoder_layers) == (3, 1)
    with pytest.raises(MtError, match="model.encoder_layers is 4 but t.pt has 3"):
        shrink(ModelConfig(encoder_layers=4, decoder_layers=1), TEACHER, {}, "t.pt")
    with pytest.raises(MtError, match="cannot be combined with finetune.adapter: lora"):
        shrink(ModelConfig(decoder_layers=1), TEACHER, {}, "t.pt", "finetune.adapter: lora")
