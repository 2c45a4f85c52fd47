"""A model with fewer layers than its `train.init_from` checkpoint, started from some of them
(`train.init_shrink`: "shrink and fine-tune", Shleifer and Rush 2020).

A distilled student is its teacher's shape with fewer decoder layers
(configs/multi30k_de_en_student.yaml). From random weights it spends its first thousands of
updates learning what the teacher's tables and encoder already hold; copied from them, it starts
near the teacher and learns what the dropped layers did. The layers kept are spread evenly over
the checkpoint's, the first always among them and the last once two or more are kept (1 of 3
keeps layer 0, 2 of 3 keep 0 and 2); the tables, final norms and
output layer are the checkpoint's. The model section says how many layers each stack keeps;
a stack left at its default keeps them all.
"""

from __future__ import annotations

import dataclasses

import torch

from mt.config import ModelConfig
from mt.errors import MtError

STACKS = {"encoder": "encoder_layers", "decoder": "decoder_layers"}


def spaced(kept: int, of: int) -> list[int]:
    """`kept` layer indices out of `of`, evenly spread: the first always, the last from two."""
    if kept == 1:
        return [0]
    return [round(i * (of - 1) / (kept - 1)) for i in range(kept)]


def shrunk_config(config: ModelConfig, stored: ModelConfig, source: str) -> ModelConfig:
    """`stored` (the checkpoint's model) with the config's layer counts, each at most the
    checkpoint's; a count left at its default keeps the checkpoint's."""
    default = ModelConfig()
    counts = {}
    for key in STACKS.values():
        new, old = getattr(config, key), getattr(stored, key)
        if new == getattr(default, key):
            new = old
        if new > old:
            raise MtError(
                f"model.{key} is {new} but {source} has {old}: train.init_shrink keeps some of "
                "its layers and adds none"
            )
        counts[key] = new
    return dataclasses.replace(stored, **counts)


def chosen_layers(model: ModelConfig, stored: ModelConfig) -> dict[str, list[int]]:
    """Each stack's kept layers, as indices into the checkpoint's."""
    return {
        stack: spaced(getattr(model, key), getattr(stored, key)) for stack, key in STACKS.items()
    }


def shrink_weights(
    weights: dict[str, torch.Tensor], chosen: dict[str, list[int]]
) -> dict[str, torch.Tensor]:
    """The checkpoint's weights renamed for the smaller model: the kept layers of each stack
    numbered from 0, the others left out, every weight outside the stacks as it is."""
    out = {}
    for key, value in weights.items():
        stack, _, rest = key.partition(".")
        index, _, tail = rest.partition(".")
        if stack not in chosen or not index.isdigit():
            out[key] = value
        elif int(index) in chosen[stack]:
            out[f"{stack}.{chosen[stack].index(int(index))}.{tail}"] = value
    return out


def shrink(
    config: ModelConfig,
    stored: ModelConfig,
    weights: dict[str, torch.Tensor],
    source: str,
    refused: str = "",
) -> tuple[ModelConfig, dict[str, torch.Tensor], str]:
    """The checkpoint's model config and weights cut to the config's layer counts, and the
    start line saying which layers were kept. `refused` names a setting the run also has that
    needs the checkpoint's whole model (an adapter, its optimizer state)."""
    if refused:
        raise MtError(
            f"train.init_shrink cannot be combined with {refused}: it needs the model of "
            f"{source} as it is"
        )
    model = shrunk_config(config, stored, source)
    chosen = chosen_layers(model, stored)
    kept = " and ".join(
        f"{stack} layers {chosen[stack]} of its {getattr(stored, key)}"
        for stack, key in STACKS.items()
    )
    return model, shrink_weights(weights, chosen), f"train.init_shrink: from {source}, the {kept}"
