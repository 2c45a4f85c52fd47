"""Constraint phrases for lexically constrained search (mt.search.constrained): a phrase's
target ids as they occur inside a sentence, the vocabulary's word edges that stop a piece
being glued onto a finished phrase, and the tracker that follows each row's progress through
its phrases token by token (fairseq's unordered rule) and counts the tokens met, which DBA's
banks are made of.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mt.tokenizer import BOS, EOS, PAD, Tokenizer


def phrase_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    """Target ids of a constraint phrase as the target tokenizer writes it inside a sentence.

    A phrase alone can be segmented differently than inside a translation: without
    sentencepiece's dummy prefix its first word would lack the word-initial mark that every
    word after a space carries. So the phrase is encoded after an anchor word and a space, and
    the anchor's pieces are dropped: sentencepiece splits at whitespace before segmenting, so
    the result is the phrase's pieces after a space, which is where terms occur in a
    translation (a term glued to a preceding character, as in "(dog", is not matched). With
    the default dummy prefix this equals encoding the phrase alone. Empty text gives [].
    """
    text = text.strip()
    if not text:
        return []
    anchor = tokenizer.encode_tgt(["a"])[0]
    both = tokenizer.encode_tgt([f"a {text}"])[0]
    if both[: len(anchor)] == anchor and len(both) > len(anchor):
        return both[len(anchor) :]
    return tokenizer.encode_tgt([text])[0]  # an odd model: the phrase's own segmentation


@dataclass(frozen=True)
class WordEdges:
    """Of each target token: whether it continues the word before it (no word-start mark,
    a letter or digit first), and whether it ends in a letter."""

    glue: torch.Tensor  # (V,) bool
    letter_end: torch.Tensor  # (V,) bool


def word_edges(tokenizer: Tokenizer, device: torch.device) -> WordEdges:
    """The target vocabulary's `WordEdges`."""
    pieces = tokenizer.tgt_pieces(list(range(tokenizer.tgt_vocab_size)))
    glue = [not p.startswith("\u2581") and p[:1].isalnum() for p in pieces]
    letter = [p[-1:].isalpha() for p in pieces]
    return WordEdges(
        torch.tensor(glue, dtype=torch.bool, device=device),
        torch.tensor(letter, dtype=torch.bool, device=device),
    )


def fit_mask(mask: torch.Tensor, size: int) -> torch.Tensor:
    """A (V,) mask cut or padded (False) to `size`."""
    out = torch.zeros(size, dtype=torch.bool, device=mask.device)
    n = min(size, mask.numel())
    out[:n] = mask[:n]
    return out


def phrase_tensors(
    constraints: list[list[list[int]]], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, C, L) phrase tokens (PAD after each phrase) and (B, C) lengths, C and L at least 1
    so that a batch without constraints needs no special case: a slot of length 0 counts as
    met from the start."""
    C = max([1] + [len(c) for c in constraints])
    L = max([1] + [len(p) for c in constraints for p in c])
    tokens = torch.full((len(constraints), C, L), PAD, dtype=torch.long)
    lengths = torch.zeros(len(constraints), C, dtype=torch.long)
    for i, phrases in enumerate(constraints):
        for j, p in enumerate(phrases):
            if any(
                t < 0 or t in (PAD, BOS, EOS) for t in p
            ):  # UNK may be emitted, so it may be asked
                raise ValueError(f"constraint {p} of sentence {i} holds PAD/BOS/EOS")
            tokens[i, j, : len(p)] = torch.tensor(p, dtype=torch.long)
            lengths[i, j] = len(p)
    return tokens.to(device), lengths.to(device)


def advance(
    progress: torch.Tensor,  # (R, C) tokens of each phrase matched so far (0 when met)
    met: torch.Tensor,  # (R, C) bool, phrase already produced
    phrases: torch.Tensor,  # (R, C, L) each row's phrase tokens
    lengths: torch.Tensor,  # (R, C)
    tok: torch.Tensor,  # (R, M) candidate next tokens of each row
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tracker states (R, M, C) after appending each candidate token to its row.

    A token that continues a phrase advances it; any other token breaks it, and the phrase
    starts over (at 1 if the token is the phrase's first). This is fairseq's unordered rule
    without a trie: phrases are tracked independently, so two phrases with a common start can
    both be in progress, and a phrase that occurs twice in the list is met by one occurrence.
    """
    nxt = phrases.gather(2, progress[:, :, None].clamp(max=phrases.size(2) - 1))[:, :, 0]
    cont = tok[:, :, None].eq(nxt[:, None, :])  # (R, M, C)
    restart = tok[:, :, None].eq(phrases[:, None, :, 0]).long()
    new = torch.where(cont, progress[:, None, :] + 1, restart)
    new_met = met[:, None, :] | new.ge(lengths[:, None, :])
    return new.masked_fill(new_met, 0), new_met


def banks(progress: torch.Tensor, met: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Constraint tokens met (...,): the whole of each met phrase plus the longest run in
    progress (runs of different phrases may overlap, so they are not added up)."""
    return (met * lengths).sum(-1) + progress.amax(-1)
