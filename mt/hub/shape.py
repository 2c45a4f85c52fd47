"""The fields a Marian and an M2M-100 config.json share (both are BART-shaped): sizes,
dropouts, positions, activation and embedding scale, read once into mt's ModelConfig keys.

Each architecture adds what differs (norm placement, tying, positions); a value mt holds once
but HF holds per side (heads, FFN width) must agree, or the import is one error line.
"""

from __future__ import annotations

from typing import Any

from mt.errors import MtError

ACTIVATIONS = {"relu": "relu", "swish": "swish", "silu": "swish", "gelu": "gelu"}


def setting(config: dict[str, Any], defaults: dict[str, Any], key: str) -> Any:
    """`config[key]`, or HF's default for the architecture where config.json leaves it out."""
    return config.get(key, defaults[key])


def shared_fields(config: dict[str, Any], defaults: dict[str, Any], where: str) -> dict[str, Any]:
    """The ModelConfig keys both architectures read alike from `config` (`where` names it)."""

    def one(enc: str, dec: str) -> int:
        a, b = setting(config, defaults, enc), setting(config, defaults, dec)
        if a != b:
            raise MtError(f"{where}: {enc} ({a}) differs from {dec} ({b}); mt has one value")
        return int(a)

    act = str(setting(config, defaults, "activation_function"))
    if act not in ACTIVATIONS:
        raise MtError(
            f"{where}: activation_function {act!r} is not supported ({', '.join(ACTIVATIONS)})"
        )
    return dict(
        d_model=int(setting(config, defaults, "d_model")),
        n_heads=one("encoder_attention_heads", "decoder_attention_heads"),
        d_ff=one("encoder_ffn_dim", "decoder_ffn_dim"),
        encoder_layers=int(setting(config, defaults, "encoder_layers")),
        decoder_layers=int(setting(config, defaults, "decoder_layers")),
        dropout=float(setting(config, defaults, "dropout")),
        attention_dropout=float(setting(config, defaults, "attention_dropout")),
        activation_dropout=float(setting(config, defaults, "activation_dropout")),
        max_positions=int(setting(config, defaults, "max_position_embeddings")),
        activation=ACTIVATIONS[act],
        scale_embeddings=bool(setting(config, defaults, "scale_embedding")),
        logits_bias=True,
    )
