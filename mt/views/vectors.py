"""One word's vector through the encoder, and the keys whose attention moved it.

The picture this serves: the same word with two meanings starts at one point (its embedding plus
its position) and each encoder layer moves it, pulled by what it attends to, so that the two
meanings end up apart. For every occurrence of a word we read the model's own vectors at the
embedding and after each encoder layer (forward hooks on the public encoder layers: the model
holds none of this logic), project all of them with one PCA, and name the keys that pushed the
occurrence most in each layer.

A key's push is its attention-weighted value after the output projection,
`c_ij = sum_h w_hij * v_hj W_out_h^T`. These sum with the residual input and the output bias to
the attention sublayer's result before its normalisation, `x_i + b + sum_j c_ij` (post-norm: the
input of `norm1`; pre-norm: the input of `norm2`). Keys are ranked by the length of `c_ij` along
the direction the drawn vector moved in that layer (the layer's output minus its input), so a
key ranks high when it pushed the vector the way it went. The feed-forward part and, in a
post-norm model, the normalisations also move the vector; they belong to no key.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mt.data.corpus import read_lines
from mt.errors import MtError
from mt.model import Transformer
from mt.tokenizer import EOS, Tokenizer

TOP_KEYS = 3  # keys named per occurrence and layer
CONTEXT_WORDS = 2  # words either side of the occurrence in its label


@dataclass
class LayerTrace:
    """One encoder layer on one sentence: what went in, what came out, and each key's push."""

    input: torch.Tensor  # (S, D) the layer's input (embedding + position for layer 1)
    output: torch.Tensor  # (S, D) the layer's output
    weights: torch.Tensor  # (H, S, S) self-attention weights, rows are queries
    contributions: torch.Tensor  # (S, S, D) c_ij: query i's push from key j
    residual: torch.Tensor  # (S, D) x_i + output bias: the path no key owns


@torch.inference_mode()
def encoder_trace(model: Transformer, src: torch.Tensor) -> list[LayerTrace]:
    """Run the encoder on one sentence `src` (1, S) and trace every layer."""
    model.eval()
    inputs: list[torch.Tensor] = []
    outputs: list[torch.Tensor] = []
    with _hooks(model, inputs, outputs):
        _, _, weights = model.encode(src, need_weights=True)
    traces = []
    for layer, x, y, w in zip(model.encoder, inputs, outputs, weights):
        attn = layer.attn
        a_in = layer.norm1(x) if layer.pre_norm else x  # what the attention reads  (1, S, D)
        S, D = x.shape[1], x.shape[2]
        v = attn.qkv(a_in).view(1, S, 3, attn.h, D // attn.h)[0, :, 2]  # (S, H, D/H)
        w_out = attn.out.weight.view(D, attn.h, D // attn.h)  # (D, H, D/H)
        value_out = torch.einsum("jhe,dhe->hjd", v, w_out)  # (H, S, D): head h, key j
        contrib = torch.einsum("hij,hjd->ijd", w[0], value_out)  # (S, S, D)
        traces.append(LayerTrace(x[0], y[0], w[0], contrib, x[0] + attn.out.bias))
    return traces


@contextmanager
def _hooks(model: Transformer, inputs: list, outputs: list) -> Iterator[None]:
    """Record each encoder layer's input and output while the block runs."""
    handles = []
    for layer in model.encoder:
        handles.append(layer.register_forward_pre_hook(lambda m, args: inputs.append(args[0])))
        handles.append(layer.register_forward_hook(lambda m, a, out: outputs.append(out[0])))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def read_sentences(given: list[str], path: Path | None) -> list[str]:
    """`--src` sentences, then the non-empty lines of `path`; before any model is loaded."""
    sentences = [s.strip() for s in given]
    if path is not None:
        if not path.is_file():
            raise MtError(f"{path}: input file not found")
        from_file = [line.strip() for line in read_lines(path) if line.strip()]
        if not from_file:
            raise MtError(f"{path}: no sentences")
        sentences += from_file
    if not sentences:
        raise MtError("give sentences with --src or --input")
    return sentences


# -- finding the word ------------------------------------------------------------------------------


@dataclass
class Match:
    """One whole-word occurrence: its source pieces (indices into the encoder's tokens)."""

    sentence_index: int
    pieces: list[int]
    context: str


def piece_spans(tokenizer: Tokenizer, sentence: str) -> list[tuple[int, int]]:
    """Byte span in the UTF-8 sentence of each source piece (the final </s> not included)."""
    sp = tokenizer.src
    try:
        proto = sp.encode(sentence, return_type="proto")
    except (TypeError, ValueError):  # sentencepiece before 0.2.1
        proto = sp.encode(sentence, out_type="immutable_proto")
    return [(p.begin, p.end) for p in proto.pieces]


def find_word(tokenizer: Tokenizer, sentences: list[str], word: str | list[str]) -> list[Match]:
    """Every occurrence of `word` as a whole word (case as given), with the pieces that cover it.
    Several words (one word in several languages: Hund, chien, dog) are followed together."""
    words = [word] if isinstance(word, str) else word
    alternatives = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
    pattern = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)")
    matches = []
    for i, sentence in enumerate(sentences):
        spans = piece_spans(tokenizer, sentence)
        for m in pattern.finditer(sentence):
            begin = len(sentence[: m.start()].encode("utf-8"))
            end = len(sentence[: m.end()].encode("utf-8"))
            pieces = [k for k, (b, e) in enumerate(spans) if b < end and e > begin]
            if pieces:
                matches.append(Match(i, pieces, _context(sentence, m.start(), m.end())))
    return matches


def _context(sentence: str, start: int, end: int) -> str:
    """The occurrence with up to CONTEXT_WORDS words either side, as written."""
    before = [m.start() for m in re.finditer(r"\S+", sentence[:start])][-CONTEXT_WORDS:]
    after = [m.end() for m in re.finditer(r"\S+", sentence[end:])][:CONTEXT_WORDS]
    return sentence[before[0] if before else start : end + (after[-1] if after else 0)].strip()


# -- the vectors, their projection and their pushers --------------------------------------------


@dataclass
class Push:
    """A key that moved an occurrence: its token, position and length along the move."""

    token: str
    position: int
    along: float


@dataclass
class Occurrence:
    sentence: str
    position: int  # the first piece's index in the encoder's tokens
    tokens: list[str]  # the word's pieces (their vectors are averaged when there are several)
    context: str
    vectors: np.ndarray  # (depths, D): embedding + position, then each encoder layer's output
    pushed_by: list[list[Push]]  # per encoder layer, the TOP_KEYS strongest pushes
    xy: np.ndarray | None = None  # (depths, 2) after the shared PCA


@dataclass
class WordVectors:
    word: str
    depths: list[str]
    occurrences: list[Occurrence]
    pca_mean: np.ndarray  # (D,)
    pca_components: np.ndarray  # (2, D)
    explained: list[float]  # share of the points' variance along each axis
    centred: bool = False  # each depth's mean over the occurrences removed before the PCA

    def to_json(self) -> dict:
        """Every number drawn, as plain JSON values."""
        return {
            "view": "vectors",
            "word": self.word,
            "depths": self.depths,
            "explained_variance": self.explained,
            "centred": self.centred,
            "occurrences": [
                {
                    "sentence": o.sentence,
                    "position": o.position,
                    "tokens": o.tokens,
                    "context": o.context,
                    "vectors": o.vectors.tolist(),
                    "xy": o.xy.tolist() if o.xy is not None else None,
                    "pushed_by": [
                        {
                            "depth": self.depths[k + 1],
                            "keys": [vars(p) for p in pushes],
                        }
                        for k, pushes in enumerate(o.pushed_by)
                    ],
                }
                for o in self.occurrences
            ],
        }


def pushes(trace: LayerTrace, pieces: list[int], tokens: list[str], top: int) -> list[Push]:
    """The keys whose contribution reaches furthest along the move of the (averaged) pieces."""
    move = (trace.output[pieces] - trace.input[pieces]).mean(0)  # (D,)
    unit = move / move.norm().clamp_min(1e-12)
    along = trace.contributions[pieces].mean(0) @ unit  # (S,) one length per key
    best = along.argsort(descending=True)[:top]
    return [Push(tokens[j], int(j), float(along[j])) for j in best]


def pca_2d(points: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Mean, the first two principal axes (2, D) and their share of the variance.

    Each axis's sign is fixed so that its largest loading is positive: the same points give the
    same picture in every run, not a mirrored one.
    """
    points = points.astype(np.float64)
    mean = points.mean(0)
    _, s, vt = np.linalg.svd(points - mean, full_matrices=False)
    comps = np.zeros((2, points.shape[1]))
    k = min(2, vt.shape[0])
    comps[:k] = vt[:k]
    for row in comps:
        if np.abs(row).max() > 0 and row[np.abs(row).argmax()] < 0:
            row *= -1
    total = float((s**2).sum())
    explained = [float(s[i] ** 2 / total) if i < len(s) and total > 0 else 0.0 for i in range(2)]
    return mean, comps, explained


def word_vectors(
    model: Transformer,
    tokenizer: Tokenizer,
    sentences: list[str],
    word: str | list[str],
    centre: bool = False,
) -> WordVectors:
    """The vectors of `word` in every sentence where it occurs, with a shared 2-D projection.
    A list follows several words together (translations of one word, in a multilingual
    model: does the encoder bring them together, layer by layer?).

    Every occurrence drifts the same long way from layer to layer, and that common drift can
    take the first axes of the PCA. `centre` removes each depth's mean over the occurrences
    before projecting, so the picture shows how the occurrences move relative to each other
    (the `vectors` stay the model's own either way).
    """
    if not sentences:
        raise MtError("no sentences given")
    words = [word] if isinstance(word, str) else word
    if not words or not all(w.strip() for w in words):
        raise MtError("--word is empty")
    word = " / ".join(words)
    limit = model.cfg.max_positions
    ids = tokenizer.encode_src(sentences)
    for i, row in enumerate(ids):
        if len(row) > limit:
            raise MtError(
                f"sentence {i + 1} has {len(row)} tokens; the model has positions for {limit}"
            )
    matches = find_word(tokenizer, sentences, words)
    if not matches:
        raise MtError(f"'{word}' is not a whole word of any of the {len(sentences)} sentences")
    device = next(model.parameters()).device
    n_layers = len(model.encoder)
    depths = ["embedding"] + [f"layer {k}" for k in range(1, n_layers + 1)]
    traces: dict[int, list[LayerTrace]] = {}
    occurrences = []
    for m in matches:
        if m.sentence_index not in traces:
            src = torch.tensor([ids[m.sentence_index]], device=device)
            traces[m.sentence_index] = encoder_trace(model, src)
        trace = traces[m.sentence_index]
        src_tokens = tokenizer.src_pieces(sentences[m.sentence_index])
        assert ids[m.sentence_index][-1] == EOS and len(src_tokens) == len(ids[m.sentence_index])
        stack = [trace[0].input[m.pieces].mean(0)] + [t.output[m.pieces].mean(0) for t in trace]
        occurrences.append(
            Occurrence(
                sentence=sentences[m.sentence_index],
                position=m.pieces[0],
                tokens=[src_tokens[k] for k in m.pieces],
                context=m.context,
                vectors=torch.stack(stack).double().cpu().numpy(),
                pushed_by=[pushes(t, m.pieces, src_tokens, TOP_KEYS) for t in trace],
            )
        )
    shift = np.zeros_like(occurrences[0].vectors)  # (depths, D)
    if centre:
        shift = np.mean([o.vectors for o in occurrences], axis=0)
    mean, comps, explained = pca_2d(np.concatenate([o.vectors - shift for o in occurrences]))
    for o in occurrences:
        o.xy = (o.vectors - shift - mean) @ comps.T
    return WordVectors(word, depths, occurrences, mean, comps, explained, centre)


def summary(found: WordVectors) -> str:
    """A few lines for the terminal: each occurrence and who pushed it in each layer."""
    lines = []
    for o in found.occurrences:
        lines.append(f"{o.context}  (pieces {' '.join(o.tokens)} at {o.position})")
        for depth, pushed in zip(found.depths[1:], o.pushed_by):
            keys = ", ".join(f"{p.token}@{p.position} {p.along:+.2f}" for p in pushed)
            lines.append(f"  {depth}: pushed most by {keys}")
    return "\n".join(lines)
