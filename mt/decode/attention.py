"""The attention weights behind one translation, ready to be looked at.

The sentence is translated first; then the model is run teacher-forced on its own output with
`need_weights`, so every weight shown is exactly one the model computed for that translation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mt.batching import pad
from mt.config import DecodeConfig
from mt.decode.search import beam_search
from mt.model import Transformer
from mt.tokenizer import BOS, EOS, Tokenizer


@dataclass
class AttentionView:
    """One kind of attention in one layer: (H, rows, cols) weights and the tokens on the axes."""

    name: str
    weights: torch.Tensor  # (H, Tq, Tk), rows sum to 1
    rows: list[str]
    cols: list[str]


@torch.inference_mode()
def sentence_attention(
    model: Transformer, tokenizer: Tokenizer, sentence: str, cfg: DecodeConfig, layer: int
) -> tuple[str, list[AttentionView]]:
    """Translate `sentence` and return the translation with its attention in layer `layer`
    (negative counts from the top): encoder self, decoder self and encoder-decoder."""
    model.eval()
    device = next(model.parameters()).device
    src = pad(tokenizer.encode_src([sentence])).to(device)
    hyp = beam_search(model, src, cfg.beam, cfg.alpha, cfg.max_len_a, cfg.max_len_b)[0][0]
    tgt_in = torch.tensor([[BOS] + hyp.tokens], device=device)
    maps = model.attention_maps(src, tgt_in)
    n_enc, n_dec = len(maps.encoder), len(maps.decoder)
    if not (-n_enc <= layer < n_enc and -n_dec <= layer < n_dec):
        raise IndexError(layer)
    src_tok = tokenizer.src_pieces(sentence)
    tgt_in_tok = ["<s>"] + tokenizer.tgt_pieces(hyp.tokens)
    tgt_out_tok = tokenizer.tgt_pieces(hyp.tokens + [EOS])  # what each decoder row predicts
    views = [
        AttentionView("encoder self-attention", maps.encoder[layer][0], src_tok, src_tok),
        AttentionView("decoder self-attention", maps.decoder[layer][0], tgt_out_tok, tgt_in_tok),
        AttentionView("encoder-decoder attention", maps.cross[layer][0], tgt_out_tok, src_tok),
    ]
    return tokenizer.decode_tgt(hyp.tokens), views
