"""Fine-tuning with a new vocabulary (`train.init_vocab: new`, eole's `update_vocab`).

A domain's text cut by the base model's tokenizer can fall into many short pieces; a tokenizer
trained on the domain cuts it into fewer, longer ones. The run trains that tokenizer as a fresh
run would, and the model starts from the checkpoint everywhere but in the vocabulary: each
embedding row (and output row, and logit bias) of a piece both vocabularies share is the
checkpoint's; a piece only the new one has keeps the fresh model's initialisation. mt's fixed
ids (pad, unk, BOS, EOS) are shared by construction.
"""

from __future__ import annotations

import sys

import torch

from mt.model import Transformer
from mt.tokenizer import EOS, Tokenizer

# The weights indexed by the vocabulary (rows), and the side whose pieces index them.
VOCAB_WEIGHTS = {
    "src_embed.weight": "src",
    "tgt_embed.weight": "tgt",
    "output.weight": "tgt",
    "output_bias": "tgt",
}


def shared_rows(old: Tokenizer, new: Tokenizer, side: str) -> tuple[list[int], list[int]]:
    """(new ids, old ids) of the pieces both tokenizers have on `side`, the fixed ids included."""
    old_sp, new_sp = getattr(old, side), getattr(new, side)
    new_ids, old_ids = list(range(EOS + 1)), list(range(EOS + 1))
    for i in range(EOS + 1, new_sp.get_piece_size()):
        j = old_sp.piece_to_id(new_sp.id_to_piece(i))
        if j > EOS:
            new_ids.append(i)
            old_ids.append(j)
    return new_ids, old_ids


def load_with_new_vocab(
    model: Transformer, weights: dict[str, torch.Tensor], old: Tokenizer, new: Tokenizer
) -> str:
    """Load `weights` (of a model with `old`'s vocabulary) into `model` (with `new`'s): every
    weight as it is, the vocabulary's rows piece by piece. Returns the one-line summary."""
    state = model.state_dict()
    rows = {side: shared_rows(old, new, side) for side in ("src", "tgt")}
    with torch.no_grad():
        for name, target in state.items():
            if name not in weights:
                continue
            side = VOCAB_WEIGHTS.get(name)
            if side is None:
                target.copy_(weights[name])
                continue
            new_ids, old_ids = rows[side]
            target[torch.tensor(new_ids)] = weights[name][torch.tensor(old_ids)].to(target.dtype)
    (sn, _), (tn, _) = rows["src"], rows["tgt"]
    kept = f"{len(sn) - EOS - 1:,} of {new.src_vocab_size - EOS - 1:,} source pieces"
    if not new.joint:
        kept += f", {len(tn) - EOS - 1:,} of {new.tgt_vocab_size - EOS - 1:,} target pieces"
    return f"new vocabulary: kept the embeddings of {kept} (the rest start fresh)"


def announce(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
