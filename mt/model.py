"""The encoder-decoder Transformer of "Attention Is All You Need", in plain torch.nn.

Read top to bottom: positions, attention, feed-forward, encoder layer, decoder layer, the model.
No training, data or search code lives here. For search, the decoder can run one step at a time:
`start_state` computes the encoder-decoder keys/values once per sentence and `step` appends each
new token's self-attention keys/values to a cache, so a step costs O(t) instead of O(t^2) (or,
with `model.decoder_self: ssru`, carries a recurrent state: mt/ssru.py).
Shapes in comments: B batch, S source length, T target length, D d_model, H heads, V vocab.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mt.config import ModelConfig
from mt.decoder_state import DecoderState, RecurrentCache, SelfCache, step_layout
from mt.dropout import Dropout
from mt.ssru import SSRU

PAD_ID = 0  # must match mt.tokenizer.PAD; the model imports only config and dropout
SHORT_QUERIES = 8  # attend: at most this many queries per row on CPU skip the fused kernel


def sinusoids(length: int, dim: int, layout: str = "interleaved") -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/dim)), PE[pos, 2i+1] = cos(same). (length, dim)
    `layout` "halves": sines in the first half, cosines in the second (Marian); "fairseq" too,
    with frequencies 10000^(-i / (dim/2 - 1)) (M2M-100, NLLB)."""
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    if layout == "fairseq":
        half = dim // 2
        inv = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / (half - 1)))
    else:
        inv = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    if layout != "interleaved":
        return torch.cat([torch.sin(pos * inv), torch.cos(pos * inv)], dim=1)
    pe = torch.zeros(length, dim)
    pe[:, 0::2] = torch.sin(pos * inv)
    pe[:, 1::2] = torch.cos(pos * inv)
    return pe


ACTIVATIONS = {"relu": F.relu, "swish": F.silu, "gelu": F.gelu}


def applied(x: torch.Tensor) -> torch.Tensor:
    """The activation of a decoding copy's feed-forward layer whose first Linear layer applies
    the ReLU itself, in the same call (mt.runtime.onednn, mt.runtime.int8)."""
    return x


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    dropout: float,
    need_weights: bool,
    causal: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Scaled dot-product attention; `mask` is boolean, True where a key may be attended, and
    `causal` lets query i see keys <= i only (in place of a mask).

    The fused kernel is used unless the weights are wanted (for plots and alignments), in which
    case the same arithmetic is spelled out so the returned weights are exactly the ones used.
    Two CPU cases also take the spelled-out path. Decoding steps (a few queries per row): there
    torch's CPU kernel has a fixed cost per (row, head) that makes it slower than two batched
    matmuls and a softmax at beam-search shapes. And bf16 (autocast on a CPU with native bf16):
    torch's bf16 CPU kernel, its backward above all, is far slower than its fp32 one at the
    recipe's sentence lengths, while the two products reach the CPU's bf16 units through
    oneDNN. But at a decoding step's shapes (a query or a few per row, a few dozen keys) those
    bf16 products are slower than fp32's, which left bf16 decoding no faster than fp32 while
    its Linear layers ran faster: bf16 decoding steps on a CPU (a bf16 copy of the weights, or
    a dev evaluation under training's autocast) attend in fp32. Measured in
    docs/studies/bf16-and-threads.md.
    `causal` without a mask lets the fused kernel skip the masked half, and on CUDA it is what
    admits the flash kernel (which takes no mask at all).
    """
    if q.dtype == torch.bfloat16 and q.device.type == "cpu" and q.size(-2) <= SHORT_QUERIES:
        with torch.autocast("cpu", enabled=False):  # autocast would cast the fp32 back
            y, w = attend(q.float(), k.float(), v.float(), mask, dropout, need_weights, causal)
        return y.to(torch.bfloat16), w
    spelled = q.device.type == "cpu" and (q.size(-2) <= SHORT_QUERIES or q.dtype == torch.bfloat16)
    if not need_weights and not spelled:
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal and mask is None
        )
        return y, None
    if causal:
        below = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
        mask = below if mask is None else mask & below
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (B, H, Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    return F.dropout(weights, dropout) @ v, (weights if need_weights else None)


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused QKV projection."""

    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.h = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def forward(
        self,
        x: torch.Tensor,  # (B, T, D)
        mask: torch.Tensor | None,
        cache: SelfCache | None = None,
        need_weights: bool = False,
        causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        if cache is not None:  # incremental decoding: keys/values of earlier steps
            k, v = cache.append(k, v)
        p = self.dropout if self.training else 0.0
        y, w = attend(q, k, v, mask, p, need_weights, causal)  # (B, H, T, D/H)
        return self.out(y.transpose(1, 2).reshape(B, T, D)), w


class CrossAttention(nn.Module):
    """Decoder queries attend to encoder outputs; keys/values can be computed once."""

    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.h = n_heads
        self.q = nn.Linear(d_model, d_model)
        self.kv = nn.Linear(d_model, 2 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def project_memory(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, S, D = memory.shape
        k, v = self.kv(memory).view(B, S, 2, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        return k, v  # (B, H, S, D/H) each

    def forward(
        self,
        x: torch.Tensor,  # (B, T, D)
        kv: tuple[torch.Tensor, torch.Tensor],  # (B / group, H, S, D/H) each
        mask: torch.Tensor,  # (B / group, 1, 1, S)
        need_weights: bool = False,
        group: int = 1,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`group` consecutive rows of x share one memory row (the beams of one sentence): their
        queries become extra query positions against that row, so beam search neither copies
        the encoder keys/values per beam nor reorders them, and one matmul serves all beams."""
        B, T, D = x.shape
        Bm = B // group
        q = self.q(x).view(Bm, group * T, self.h, D // self.h).transpose(1, 2)
        p = self.dropout if self.training else 0.0
        y, w = attend(q, kv[0], kv[1], mask, p, need_weights)  # (Bm, H, group*T, D/H)
        if w is not None and group > 1:
            w = w.view(Bm, self.h, group, T, -1).transpose(1, 2).reshape(B, self.h, T, -1)
        return self.out(y.transpose(1, 2).reshape(B, T, D)), w


class FeedForward(nn.Module):
    def __init__(
        self, d_model: int, d_ff: int, activation_dropout: float, activation: str = "relu"
    ) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.dropout = Dropout(activation_dropout)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dropout(self.activation(self.fc1(x))))


def fusable(ffn: FeedForward) -> bool:
    """Whether a decoding copy may apply this feed-forward layer's ReLU inside its first Linear
    layer's call: a plain Linear with a ReLU after it (an adapter's wrapped layer adds its
    update before the activation)."""
    return type(ffn.fc1) is nn.Linear and ffn.activation is F.relu


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.pre_norm = cfg.norm == "pre"
        self.attn = SelfAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation_dropout, cfg.activation)
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.dropout = Dropout(cfg.dropout)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.pre_norm:
            y, w = self.attn(self.norm1(x), mask, need_weights=need_weights)
            x = x + self.dropout(y)
            return x + self.dropout(self.ffn(self.norm2(x))), w
        y, w = self.attn(x, mask, need_weights=need_weights)
        x = self.norm1(x + self.dropout(y))
        return self.norm2(x + self.dropout(self.ffn(x))), w


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.pre_norm = cfg.norm == "pre"
        self.self_attn: SelfAttention | SSRU = (
            SSRU(cfg.d_model)
            if cfg.decoder_self == "ssru"
            else SelfAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        )
        self.cross_attn = CrossAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation_dropout, cfg.activation)
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.norm3 = nn.LayerNorm(cfg.d_model)
        self.dropout = Dropout(cfg.dropout)

    def forward(
        self,
        x: torch.Tensor,  # (B, T, D)
        self_mask: torch.Tensor | None,
        memory_kv: tuple[torch.Tensor, torch.Tensor],
        memory_mask: torch.Tensor,
        cache: SelfCache | RecurrentCache | None = None,
        need_weights: bool = False,
        group: int = 1,
        causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        drop = self.dropout
        if self.pre_norm:
            y, ws = self.self_attn(self.norm1(x), self_mask, cache, need_weights, causal)
            x = x + drop(y)
            y, wc = self.cross_attn(self.norm2(x), memory_kv, memory_mask, need_weights, group)
            x = x + drop(y)
            return x + drop(self.ffn(self.norm3(x))), ws, wc
        y, ws = self.self_attn(x, self_mask, cache, need_weights, causal)
        x = self.norm1(x + drop(y))
        y, wc = self.cross_attn(x, memory_kv, memory_mask, need_weights, group)
        x = self.norm2(x + drop(y))
        return self.norm3(x + drop(self.ffn(x))), ws, wc


@dataclass
class AttentionMaps:
    """Per layer (B, H, Tq, Tk) attention weights, for plots and alignments."""

    encoder: list[torch.Tensor]
    decoder: list[torch.Tensor]
    cross: list[torch.Tensor]


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, src_vocab: int, tgt_vocab: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.tgt_vocab = tgt_vocab
        d = cfg.d_model
        self.src_embed = nn.Embedding(src_vocab, d, padding_idx=PAD_ID)
        tie = cfg.tie_embeddings and src_vocab == tgt_vocab
        self.tgt_embed = self.src_embed if tie else nn.Embedding(tgt_vocab, d, padding_idx=PAD_ID)
        table = sinusoids(cfg.max_positions + cfg.position_offset, d, cfg.positions)
        self.register_buffer("positions", table[cfg.position_offset :], persistent=False)
        self.embed_scale = math.sqrt(d) if cfg.scale_embeddings else 1.0
        self.dropout = Dropout(cfg.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        # Pre-norm stacks end with a norm; post-norm layers already end with one.
        pre = cfg.norm == "pre"
        self.encoder_norm = nn.LayerNorm(d) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d) if pre else nn.Identity()
        self.output = nn.Linear(d, tgt_vocab, bias=False)
        if cfg.tie_embeddings or cfg.tie_output:
            self.output.weight = self.tgt_embed.weight
        bias = torch.zeros(tgt_vocab) if cfg.logits_bias else None  # fixed, not trained (Marian)
        self.register_buffer("output_bias", bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for name, p in self.named_parameters():
            if "embed" in name:
                nn.init.normal_(p, 0.0, self.cfg.d_model**-0.5)
            elif p.dim() > 1:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        with torch.no_grad():
            self.src_embed.weight[PAD_ID].zero_()
            self.tgt_embed.weight[PAD_ID].zero_()

    def _embed(self, table: nn.Embedding, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        T = ids.size(1)
        if offset + T > self.cfg.max_positions:
            raise ValueError(f"sequence of {offset + T} exceeds max_positions")
        pos = self.positions[offset : offset + T]
        return self.dropout(table(ids) * self.embed_scale + pos)  # (B, T, D)

    def encode(
        self, src: torch.Tensor, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """src (B, S) -> memory (B, S, D), memory mask (B, 1, 1, S), encoder attention weights."""
        mask = src.ne(PAD_ID)[:, None, None, :]
        x = self._embed(self.src_embed, src)
        weights = []
        for layer in self.encoder:
            x, w = layer(x, mask, need_weights)
            if w is not None:
                weights.append(w)
        return self.encoder_norm(x), mask, weights

    def _decode(
        self,
        tgt_in: torch.Tensor,
        memory_kv: list[tuple[torch.Tensor, torch.Tensor]],
        memory_mask: torch.Tensor,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        # Targets are right-padded, so under the causal rule a real position never sees a pad:
        # `is_causal` alone is exact for every real position (and admits flash attention).
        # Attention maps also mask pad keys, so their pad rows show no weight on padding.
        self_mask = tgt_in.ne(PAD_ID)[:, None, None, :] if need_weights else None  # (B,1,1,T)
        x = self._embed(self.tgt_embed, tgt_in)
        self_w, cross_w = [], []
        for layer, kv in zip(self.decoder, memory_kv):
            x, ws, wc = layer(x, self_mask, kv, memory_mask, None, need_weights, causal=True)
            if ws is not None:  # an SSRU (model.decoder_self) has no weights to show
                self_w.append(ws)
            if wc is not None:
                cross_w.append(wc)
        return self.project(x), self_w, cross_w  # (B, T, V)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits (B, T, V) for training and scoring."""
        memory, mask, _ = self.encode(src)
        kv = [layer.cross_attn.project_memory(memory) for layer in self.decoder]
        return self._decode(tgt_in, kv, mask)[0]

    def attention_maps(self, src: torch.Tensor, tgt_in: torch.Tensor) -> AttentionMaps:
        """All attention weights for a forced target, as the model computes them."""
        memory, mask, enc_w = self.encode(src, need_weights=True)
        kv = [layer.cross_attn.project_memory(memory) for layer in self.decoder]
        _, self_w, cross_w = self._decode(tgt_in, kv, mask, need_weights=True)
        return AttentionMaps(enc_w, self_w, cross_w)

    def start_state(
        self, memory: torch.Tensor, memory_mask: torch.Tensor, group: int = 1
    ) -> DecoderState:
        """Encoder-decoder keys/values, computed once per sentence, and empty self caches.
        `group` > 1 gives each sentence that many decoder rows (beams), sharing its memory."""
        kv = [step_layout(*layer.cross_attn.project_memory(memory)) for layer in self.decoder]
        caches = [
            RecurrentCache() if isinstance(layer.self_attn, SSRU) else SelfCache()
            for layer in self.decoder
        ]
        return DecoderState(memory_mask, kv, caches, 0, group)

    def step(
        self, tokens: torch.Tensor, state: DecoderState, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Feed one token per decoder row (B,); returns next-token logits (B, V) and, if asked,
        the cross-attention weights of the last layer (B, H, S). Appends to `state`'s caches."""
        hidden, cross = self.step_hidden(tokens, state, need_weights)
        return self.project(hidden), cross

    def step_hidden(
        self, tokens: torch.Tensor, state: DecoderState, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`step` without the output layer: the last decoder layer's output (B, D), for search
        that projects rows a chunk at a time (`project`)."""
        x = self._embed(self.tgt_embed, tokens[:, None], offset=state.length)  # (B, 1, D)
        cross = None
        for layer, kv, cache in zip(self.decoder, state.memory_kv, state.caches):
            x, _, cross = layer(x, None, kv, state.memory_mask, cache, need_weights, state.group)
        state.length += 1
        return x[:, 0], (cross[:, :, 0] if cross is not None else None)

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        """Decoder output (..., D) -> next-token logits (..., V).

        Under autocast on a CPU (bf16) the output layer computes in fp32: bf16 logits, rounded
        to 8 bits of mantissa, left the recipe's bf16 training behind fp32's test BLEU at equal
        updates, and fp32 logits close that gap for a small part of bf16's training speed
        (docs/studies/recipe-search.md, round 25).
        """
        hidden = self.decoder_norm(hidden)
        if hidden.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
            with torch.autocast("cpu", enabled=False):
                logits = self.output(hidden.float())
        else:
            logits = self.output(hidden)
        return logits if self.output_bias is None else logits + self.output_bias
