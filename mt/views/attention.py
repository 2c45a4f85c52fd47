"""The attention weights behind one translation, ready to be looked at.

The sentence is translated first; then the model is run teacher-forced on its own output with
`need_weights`, so every weight shown is exactly one the model computed for that translation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from mt.batching import pad
from mt.config import DecodeConfig
from mt.model import AttentionMaps, Transformer
from mt.search.dispatch import search
from mt.tokenizer import BOS, EOS, Tokenizer
from mt.translation.target import Target, model_for, target_rules


@dataclass
class AttentionView:
    """One kind of attention in one layer: (H, rows, cols) weights and the tokens on the axes."""

    name: str
    weights: torch.Tensor  # (H, Tq, Tk), rows sum to 1
    rows: list[str]
    cols: list[str]


@dataclass
class SentenceAttention:
    """A translation and every attention weight the model computed for it."""

    source: str
    translation: str
    src_tokens: list[str]  # encoder tokens, the final </s> included
    tgt_in_tokens: list[str]  # decoder inputs: <s> and the translation's pieces
    tgt_out_tokens: list[str]  # what each decoder row predicts: the pieces and </s>
    maps: AttentionMaps  # per layer (1, H, rows, cols)

    def views(self, layer: int) -> list[AttentionView]:
        """Layer `layer` (negative counts from the top) of the three kinds of attention; the
        decoder's own is left out of a model whose decoder has SSRU layers (no weights)."""
        n_enc, n_dec = len(self.maps.encoder), len(self.maps.cross)
        if not (-n_enc <= layer < n_enc and -n_dec <= layer < n_dec):
            raise IndexError(layer)
        src, t_in, t_out = self.src_tokens, self.tgt_in_tokens, self.tgt_out_tokens
        own = self.maps.decoder
        return [
            AttentionView(KIND_NAMES["encoder"], self.maps.encoder[layer][0], src, src),
            *([AttentionView(KIND_NAMES["decoder"], own[layer][0], t_out, t_in)] if own else []),
            AttentionView(KIND_NAMES["cross"], self.maps.cross[layer][0], t_out, src),
        ]

    def alignment(self) -> list[tuple[int, int]]:
        """(source, target) pairs: each target piece's most-attended source token in the last
        layer, averaged over heads, as `mt translate --alignment` reports it."""
        last = self.maps.cross[-1][0].float().mean(0)[:-1]  # (T, S) without the </s> row
        return [(int(s), t) for t, s in enumerate(last.argmax(-1).tolist())]


KIND_NAMES = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention",
    "cross": "encoder-decoder attention",
}


@torch.inference_mode()
def translate_with_attention(
    model: Transformer,
    tokenizer: Tokenizer,
    sentence: str,
    cfg: DecodeConfig,
    target: Target | None = None,
) -> SentenceAttention:
    """Translate `sentence` with the settings' search, greedy or beam (into `target`'s
    language, for a multilingual model), then run the model teacher-forced on its output to
    read every attention weight it computes for that translation. The language token shows
    where the model reads it."""
    model.eval()
    device = next(model.parameters()).device
    target = target or Target(None, [], None, None)
    model = model_for(model, target)  # type: ignore[assignment]
    src = pad([target.src_mark + tokenizer.encode_src([sentence])[0]]).to(device)
    # The best output of plain search: n-best, stop-early and n-gram bans do not apply.
    plain = dataclasses.replace(cfg, nbest=1, stop_early=False, no_repeat_ngram=0)
    hyp = search(model, src, plain, rules=target_rules(target))[0][0]
    tgt_in = torch.tensor([[BOS] + hyp.tokens], device=device)
    marks = [tokenizer.src.id_to_piece(i) for i in target.src_mark]
    start = target.start if target.forced is None else target.forced  # the row shown first
    first = "<s>" if start is None else tokenizer.tgt.id_to_piece(start)
    return SentenceAttention(
        source=sentence,
        translation=tokenizer.decode_tgt(hyp.tokens),
        src_tokens=marks + tokenizer.src_pieces(sentence),
        tgt_in_tokens=[first] + tokenizer.tgt_pieces(hyp.tokens),
        tgt_out_tokens=tokenizer.tgt_pieces(hyp.tokens + [EOS]),
        maps=model.attention_maps(src, tgt_in),
    )


def sentence_attention(
    model: Transformer,
    tokenizer: Tokenizer,
    sentence: str,
    cfg: DecodeConfig,
    layer: int,
    target: Target | None = None,
) -> tuple[str, list[AttentionView]]:
    """Translate `sentence` and return the translation with its attention in layer `layer`
    (negative counts from the top): encoder self, decoder self and encoder-decoder."""
    att = translate_with_attention(model, tokenizer, sentence, cfg, target)
    return att.translation, att.views(layer)


def attention_json(att: SentenceAttention) -> dict:
    """The viewer's attention data (the format is documented once, in mt/viewer/viewer.js):
    what `mt attention --html` inlines and what an attention endpoint can return as is."""
    src, t_in, t_out = att.src_tokens, att.tgt_in_tokens, att.tgt_out_tokens
    axes = {"encoder": (src, src), "decoder": (t_out, t_in), "cross": (t_out, src)}
    maps = {"encoder": att.maps.encoder, "decoder": att.maps.decoder, "cross": att.maps.cross}
    return {
        "view": "attention",
        "source": att.source,
        "translation": att.translation,
        "kinds": [
            {
                "id": kind,
                "label": KIND_NAMES[kind],
                "rows": axes[kind][0],
                "cols": axes[kind][1],
                "weights": [w[0].float().cpu().tolist() for w in maps[kind]],
            }
            for kind in ("encoder", "decoder", "cross")
            if maps[kind]  # an SSRU decoder has no self-attention to show
        ],
        "alignment": {
            "src_tokens": src,
            "tgt_tokens": t_out[:-1],
            "pairs": [list(p) for p in att.alignment()],
        },
    }


def attention_data(
    model: Transformer, tokenizer: Tokenizer, sentence: str, cfg: DecodeConfig
) -> dict:
    """Translate `sentence` and return the viewer's data for it: the body an attention
    endpoint answers with, and what `MtViewer.render` draws."""
    return attention_json(translate_with_attention(model, tokenizer, sentence, cfg))


def layer_label(layer: int, n_layers: int) -> str:
    """'last layer (3 of 3)' or 'layer 1 of 3' for a layer index that may count from the top."""
    k = layer % n_layers
    return (
        f"last layer ({n_layers} of {n_layers})"
        if k == n_layers - 1
        else f"layer {k + 1} of {n_layers}"
    )
