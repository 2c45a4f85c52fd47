"""Open texts that share a key share the span ban's answer (`mt.spans.alike`), and the scan's
automaton (`mt.spans.automaton`) follows `re` where it reads the patterns."""

from __future__ import annotations

import random
import re

import pytest
from support.span_inputs import ALLOWED, DENSE

from mt.spans import WIDEST, _compiled
from mt.spans.alike import Alike
from mt.spans.automaton import Automaton, advance, scan, start_state
from mt.spans.index import PieceIndex, may, starts_of
from mt.spans.open import open_starts
from mt.spans.rows import read

# Words that keep a span under way (a tag's attributes) and pieces of GCC's quotes.
WORDS = [" ARG1", " is", " smaller", " than", " ARG2", "<ARG2", " x", "a", " /", "</a",
         ' href="', "http://", "x.de", '"', "%<", "INT_MAX", "__builtin", "_call", "%>", " <sec",
         ">"]  # fmt: skip
PIECES = DENSE + WORDS


def _answer(index: PieceIndex, state, ok: tuple[str, ...]) -> set[int]:
    """The pieces banned after open text `state`, read from its own text (no key shared), with
    those banned after any row (`alone_spans`, less those `ok` frees): the row's mask. The
    open text's own answer may or may not name a piece that completes a span by itself, as
    its walks propose it or not; the mask holds it either way."""
    head, end, starts = state
    found = index.completing(head, end, list(starts))
    free = starts_of(ok)
    own = {v for v, spans, _ in found if not ok or not free.issuperset(spans)}
    alone = {v for v, spans in index.alone_spans.items() if not all(may(x, ok) for x in spans)}
    return own | alone


def test_open_texts_with_one_key_are_banned_alike() -> None:
    """Rows grown piece by piece, as a search grows them, each read to its open text, for
    sentences allowed different spans: the ban's answer, shared between open texts of one key
    (`PieceIndex.bans`), is the mask read from each row's own text. The rows stay inside tags,
    GCC quotes and printf runs for many steps, so texts share keys."""
    rng = random.Random(1)
    index, alike = PieceIndex(PIECES), Alike(PIECES)
    keys: set[tuple] = set()
    shared = 0
    for _ in range(400):
        ok = tuple(rng.sample(ALLOWED + ["%", "<a", "%<"], rng.randrange(0, 3)))
        row, last = "", None
        for _ in range(rng.randrange(1, 30)):
            piece = rng.choice(WORDS) if rng.random() < 0.6 else rng.choice(DENSE)
            row += piece
            state = read(row, open_starts(row))
            if state is None:
                continue
            grown = len(piece) if last is not None else 0
            key = alike.key(*state, grown)
            last = state
            if key is not None:
                shared += key[0] in index._shared
                keys.add(key[0])
            alone = {v for v, x in index.alone_spans.items() if not all(may(s, ok) for s in x)}
            got = set(index.bans(state, ok, grown).tolist()) | alone
            assert got == _answer(index, state, ok), (state[1], ok)
    assert shared > 1000 and len(keys) > 50  # the keys are shared, and not all alike


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (" <ARG2 ARG1 is", " <ARG2 ARG1 is smaller than", True),  # inside a tag's attributes
        (" <ARG2 ARG1", " <Pfad a1", True),  # whatever the name, once attributes start
        (" <ARG2 ARG1", " <ARG2 x", False),  # `\b` and lookbehinds tell a digit from a letter
        (" %<INT_MAX", " %<__builtin_call", True),  # GCC's `%<` is decided: nothing under way
        (" <b", " <x", False),  # `<b` may be an element's name (`<br>`), `<x` no known one
        (" <ARG2 ARG1", " <ARG2 ARG1 /", False),  # `/>` would close a tag that is markup
        (" %s", " %", False),
    ],
)
def test_keys_tell_apart_what_a_piece_can_tell_apart(a: str, b: str, same: bool) -> None:
    """Texts whose continuations complete the same spans share a key; those where some piece
    tells them apart do not."""
    alike = Alike(PIECES)
    keys = []
    for text in (a, b):
        state = read(text, open_starts(text))
        assert state is not None
        keys.append(alike.key(*state, 0))
    assert keys[0] is not None and keys[1] is not None
    assert (keys[0] == keys[1]) == same


def test_a_state_grown_from_its_parent_is_the_state_read_whole() -> None:
    """`advance` from a kept state, a piece at a time, lands where reading the text whole does:
    the key of a row does not depend on how its open text was reached."""
    rng = random.Random(2)
    for _ in range(300):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randrange(1, 12)))
        state = start_state(" ")
        for k in range(len(text)):
            state = advance(state, text[k])
        assert state == advance(start_state(" "), text), text


def test_the_automaton_matches_where_re_does() -> None:
    """Over random texts of span characters, the automaton finds a match at a start exactly
    where `re` does (the scan's expression, lookarounds and all), and no thread is left where
    `re` can no longer match, by appending any of the test characters."""
    auto = scan()
    assert auto is not None
    pattern = _compiled(WIDEST)
    chars = "%<>/$&;#@.:-_ \"'=aAsdq0159wxh{}()"
    rng = random.Random(3)
    for _ in range(3000):
        text = "".join(rng.choice(chars) for _ in range(rng.randrange(1, 9)))
        prev = rng.choice([None, " ", "a", "5", "%"])
        threads, matched = (auto.start,), False
        last = prev
        for c in text:
            if not threads:
                break
            threads, hit = auto.step(threads, last, c)
            matched |= hit
            last = c
        if threads:  # the end of the text: what is left matches where it needs nothing more
            matched |= auto.closure(threads, text[-1], None)[1]  # no character follows
        full = (prev or "") + text
        want = pattern.match(full, len(prev or "")) is not None
        assert matched == want, (prev, text)


def test_a_kept_move_is_the_move_made_again() -> None:
    """The automaton keeps its moves (`step`, `settle`): over texts read twice (the second
    time from the store), each answer is the one computed afresh, for threads reached after
    different characters before them."""
    auto = scan()
    assert auto is not None
    fresh = Automaton(_compiled(WIDEST).pattern)
    chars = "%<>/$&;#@.:-_ \"'=aAsdq0159wxh"
    rng = random.Random(5)
    texts = ["".join(rng.choice(chars) for _ in range(rng.randrange(1, 9))) for _ in range(1000)]
    befores = [rng.choice([None, " ", "a", "5", "%", "<"]) for _ in texts]
    for _ in range(2):
        for text, before in zip(texts, befores):
            threads, prev = (auto.start,), before
            for c in text:
                fresh._moves.clear()  # computed, never looked up
                assert auto.settle(threads, prev) == fresh.settle(threads, prev)
                fresh._moves.clear()
                moved = auto.step(threads, prev, c)
                assert moved == fresh.step(threads, prev, c), (threads, prev, c)
                threads, prev = moved[0], c
                if not threads:
                    break


def test_an_expression_the_automaton_cannot_follow_is_refused() -> None:
    """A backreference is refused, so a pattern that needs one leaves the ban without keys
    (each open text answered from its own text) rather than with wrong ones."""
    with pytest.raises(ValueError):
        Automaton(r"(a)\1")
    assert re.compile(r"(a)\1")  # `re` itself takes it
