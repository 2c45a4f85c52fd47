"""Terms written into the source: how a model trained with `data.terms` is told a term.

Dinu et al. (2019) trained a model on source lines in which some words are followed by their
translation between markers, so that at translation time a glossary's target term written the
same way is used, and inflected for its sentence, without a constrained search. `mt` writes
the "append" variant inline, as OPUS-CAT's term models do:

    Ein Mann wirft einen｟term｠ Frisbee｟to｠ disc｟/term｠.

The source term stays where it was (the model reads the sentence as written), the target
term follows it. The three markers are reserved pieces of the tokenizer (user-defined
symbols: sentencepiece keeps each one piece and never cuts text into them), so a tokenizer
that has them is the sign of a model trained with terms (`takes_terms`). Their brackets are
those of `data.protect`'s placeholders (`｟0｠`), which no span pattern matches.

One function writes the annotation for both sides of its use: training (mt.data.terms) and the
glossary stage of translation (mt.translation.terms), so a model reads at translation time the
very format it learnt.
"""

from __future__ import annotations

from collections.abc import Sequence

from mt.tokenizer import UNK

TERM = "｟term｠"  # opens an annotated source term
TO = "｟to｠"  # between the source term and its target term
END = "｟/term｠"  # closes the target term
MARKERS = (TERM, TO, END)


def annotate(text: str, terms: Sequence[tuple[int, int, str]], masked: Sequence[bool] = ()) -> str:
    """`text` with each `(start, end, target)` (character offsets of a source term, in order,
    none overlapping) written as `｟term｠ source｟to｠ target｟/term｠`, or, where `masked`
    says so (one flag per term; none: no term), as `｟term｠｟to｠ target｟/term｠`: the source
    term left out, so that its target can only be copied (source term masking, Ailem et al.
    2021).

    The markers are glued to the text around them, so the words keep the pieces they have
    unannotated: the term and its target each start a word (`▁Hund`, `▁dog`), and no marker
    costs a piece for a space of its own; the rest of the line is left as written."""
    out: list[str] = []
    pos = 0
    for k, (start, end, target) in enumerate(terms):
        if start < pos or end <= start:
            raise ValueError(f"term spans must be in order and not overlap: {terms!r}")
        if k < len(masked) and masked[k]:
            out += [text[pos:start].rstrip(), TERM, TO, " "]
        else:
            out += [text[pos:start].rstrip(), TERM, " ", text[start:end], TO, " "]
        out += [" ".join(target.split()), END]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def takes_terms(tokenizer: object) -> bool:
    """Whether a tokenizer (mt.tokenizer.Tokenizer) reserves the three markers as pieces of
    its source side: a model trained with `data.terms`."""
    src = getattr(tokenizer, "src", None)
    return src is not None and all(src.piece_to_id(m) != UNK for m in MARKERS)
