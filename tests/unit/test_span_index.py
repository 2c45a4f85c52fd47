"""The span ban's per-vocabulary index (`mt.spans.index`): built once per tokenizer, shared by
every rule of that vocabulary, and its answers those of a scan over the whole vocabulary."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.ban_oracle import scan, wrong
from support.span_inputs import ALLOWED, DENSE, SPANS, inject_text

from mt.config import TokenizerConfig
from mt.spans import WIDEST, find_spans
from mt.spans import checked as checked_module
from mt.spans import index as index_module
from mt.spans.bans import SpanRule
from mt.spans.checked import completed_by_class, completed_each
from mt.spans.index import PieceIndex, _walk, index_for, may, piece_texts, starts_of
from mt.spans.open import GROWING, alive_patterns, class_map, final_test, growth, open_starts
from mt.spans.rows import read
from mt.tokenizer import Tokenizer, train_tokenizer

CPU = torch.device("cpu")
SPAN_CHARS = set("%<>{}&;$@/:.#()")


@pytest.fixture(scope="module")
def strings_tokenizer(multi30k_dir: Path) -> Tokenizer:
    """A tokenizer trained on real text holding spans: Multi30k's English with the benchmark's
    spans injected (printf, braces, shell, entities, URLs, addresses, tags), as software
    strings hold them, so `%`, `<`, `{0}`, `&amp;` and the like are pieces of their own."""
    with gzip.open(multi30k_dir / "train.en.gz", "rt", encoding="utf-8") as f:
        lines = [next(f).strip() for _ in range(3000)]
    rng = random.Random(0)
    lines = [inject_text(x, k, rng)[0] for k, x in enumerate(lines)]
    lines += [" ".join(v) for v in SPANS.values()] * 20
    return train_tokenizer(lines, lines, TokenizerConfig(vocab_size=600))


def _rows(texts: list[str]) -> st.SearchStrategy[list[int]]:
    spanish = [v for v, t in enumerate(texts) if t and set(t) & SPAN_CHARS]
    other = [v for v, t in enumerate(texts) if t]
    return st.lists(st.one_of(st.sampled_from(spanish), st.sampled_from(other)), max_size=25)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_index_bans_what_a_scan_of_the_vocabulary_finds(strings_tokenizer, data) -> None:
    """For any row, the pieces the index bans after its open text are exactly those that a
    scan of every piece with `find_spans` finds completing a span not allowed; the rest of
    the scan's pieces are the ones banned after any row (`alone`)."""
    rule = SpanRule(strings_tokenizer, CPU)
    texts = rule.texts
    row = data.draw(_rows(texts), label="row")
    text = "".join(texts[v] for v in row)
    ok = tuple(data.draw(st.lists(st.sampled_from(["%s", "<b>", "$HOME", "{0}", "&amp;"]),
                                  max_size=2), label="allowed"))  # fmt: skip
    ids = rule.row_bans(text, ok)
    own = set() if ids is None else set(ids.tolist())
    scan = set()
    for v, piece in enumerate(texts):
        new = [s.text for s in find_spans(text + piece, WIDEST) if s.end > len(text) and piece]
        if any(not any(a.startswith(x) for a in ok) for x in new):
            scan.add(v)
    alone = set(rule.alone.nonzero().squeeze(1).tolist())
    assert own <= scan, (text, sorted(texts[v] for v in own - scan))
    assert scan <= own | alone, (text, sorted(texts[v] for v in scan - own - alone))


def test_the_index_is_built_once_per_tokenizer(strings_tokenizer, monkeypatch) -> None:
    """Every rule of a vocabulary (each translator builds one) shares one index, also across
    tokenizer objects of the same model (a reload): a row ending another rule has read is a
    lookup, the vocabulary neither scanned nor walked again."""
    tok = strings_tokenizer
    again = Tokenizer(tok.src_proto, tok.tgt_proto if not tok.joint else None)
    built: list[int] = []
    init = PieceIndex.__init__

    def counted(self, texts):
        built.append(len(texts))
        init(self, texts)

    monkeypatch.setattr(PieceIndex, "__init__", counted)
    monkeypatch.setattr(index_module, "_INDEXES", type(index_module._INDEXES)())
    first, second = SpanRule(tok, CPU), SpanRule(again, CPU)
    assert first.index is second.index is index_for(tok)
    assert built == [tok.tgt_vocab_size]

    rows = [" a %", " a <b", " see {0", " &amp", " $HO", " at www.examp"]
    history = [tok.encode_tgt([r])[0] for r in rows]
    width = max(map(len, history))
    padded = torch.tensor([h + h[-1:] * (width - len(h)) for h in history])
    sent = torch.zeros(len(rows), dtype=torch.long)
    walked: list[str] = []
    walk = checked_module._reaching

    def counted_walk(line, pieces):
        walked.append(line)
        return walk(line, pieces)

    monkeypatch.setattr(checked_module, "_reaching", counted_walk)
    want = first.rows_mask(padded, sent, None).dense(len(rows))
    assert walked, "the rows hold open spans"
    walked.clear()
    got = second.rows_mask(padded, sent, None).dense(len(rows))
    assert walked == [] and torch.equal(got, want)


def test_piece_texts_are_what_each_piece_writes(strings_tokenizer) -> None:
    """The index reads the pieces as the text they add: a word piece with its space, control
    pieces as nothing, so a row's text is its pieces' texts joined."""
    texts = piece_texts(strings_tokenizer)
    ids = strings_tokenizer.encode_tgt(["A man at %s <b>home</b>."])[0]
    assert "".join(texts[v] for v in ids).strip() == "A man at %s <b>home</b>."
    assert texts[0] == "" and len(texts) == strings_tokenizer.tgt_vocab_size


# Open texts the software-strings model wrote (scripts/bench/bans.py), and a few more kinds.
ENDINGS = [
    " %06.2222",
    ".%.255",
    "%%(cc",
    " <UUasese",
    ".<refs | --refs | --path-",
    " <%.*s: <%.*s",
    " <pid",
    ".ftp",
    " %2",
    " $HO",
    " {0",
    " {count, plural, one {# file",
    " &am",
    " at www.ex",
    " x@exa",
    " <% x %",
    " %<na",
    ' <a href="',
    " {{ na",
    " %1$",
    " ${HO",
    " &#x1",
]


def _walked_by_brute_force(index: PieceIndex, end: str, s: int, among) -> set[int]:
    """What the walk finds, piece by piece over the whole vocabulary: the pieces along which
    a span of `among` from `s` is completed (`growth`), read in those patterns' classes."""
    classes = class_map(index.chars, among)
    mapped = end.translate(classes)
    found = set()
    for v, text in enumerate(index.texts):
        piece = text.translate(classes)
        for k in range(1, len(piece) + 1):
            alive, at_end, final = growth(mapped + piece[:k], s, len(end), among)
            if final or (at_end and k == len(piece)):
                found.add(v)
            if final or not alive:
                break
    return found


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_walk_finds_what_a_scan_of_every_piece_finds(strings_tokenizer, data) -> None:
    """The walk of a flat trie that holds only the pieces with a character the patterns can
    end on (`final_test`) finds the pieces that a piece-by-piece check of the whole
    vocabulary finds, after real and random open texts."""
    index = PieceIndex(piece_texts(strings_tokenizer))
    texts = index.texts
    row = data.draw(_rows(texts), label="row")
    text = data.draw(st.sampled_from(["".join(texts[v] for v in row)] + ENDINGS), label="text")
    state = read(text, open_starts(text))
    if state is None:
        return
    _, end, starts = state
    for s in starts:
        among = alive_patterns(end, s)
        if not among:
            continue
        classes, trie = index._trie(among)
        key = (end.translate(classes), (s,), among)
        assert set(_walk(trie, *key)) == _walked_by_brute_force(index, end, s, among), end
        held = {v for v, t in enumerate(texts) if final_test(among).search(t)}
        assert set(trie.pieces) == held


def test_every_span_ends_on_a_character_its_pattern_can_end_on() -> None:
    """`final_test` is read off the patterns' last atoms: each span `find_spans` finds in
    the benchmark's spans and the endings above ends on a character that passes the test of
    the pattern that found it (and not, for a tag, on a letter)."""
    kinds = {k: frozenset({k}) for k in range(len(GROWING))}
    lines = [" ".join(v) for v in SPANS.values()] + [e + "s>" for e in ENDINGS]
    seen = 0
    for line in lines:
        for span in find_spans(line, WIDEST):
            ks = [k for k, (kind, _) in enumerate(GROWING) if kind == span.kind]
            assert any(final_test(kinds[k]).fullmatch(span.text[-1]) for k in ks), span
            seen += 1
    assert seen > 20
    assert final_test(frozenset({1})).fullmatch(">") and not final_test(frozenset({1})).search("a")


@given(
    span=st.text(alphabet="%s<b>{0}$HOME", max_size=6),
    ok=st.lists(st.sampled_from(["%s", "<b>", "$HOME", "{0}", "%", "<b"]), max_size=3),
)
def test_the_starts_of_the_allowed_spans_are_what_may_lets_through(span, ok) -> None:
    """`starts_of` (a set lookup per span) lets through exactly the spans `may` does."""
    assert (span in starts_of(tuple(ok))) == may(span, tuple(ok))


def _alive(end: str, starts) -> frozenset[int]:
    return frozenset().union(*(alive_patterns(end, s) for s in starts))


def test_pieces_of_words_that_read_alike_are_checked_once(strings_tokenizer, monkeypatch) -> None:
    """Checking each class of word pieces once (`completed_by_class`) gives every piece of the
    vocabulary, not only the walk's candidates, what a check of each piece gives, after
    real open texts and those where any word extends the span; and it checks fewer lines.
    With the classes of patterns other than those alive, it would not."""
    texts = piece_texts(strings_tokenizer)
    index = PieceIndex(texts)
    scanned: list[int] = []
    reaching = checked_module._reaching
    monkeypatch.setattr(
        checked_module, "_reaching", lambda line, ps: scanned.append(len(ps)) or reaching(line, ps)
    )
    endings = ENDINGS + [".$ACC", " %(body", " %1$s", ' <b title="x %', " <ARG2 ARG1 is", "%0"]
    differ = 0
    for text in endings:
        state = read(text, open_starts(text))
        if state is None:
            continue
        head, end, starts = state
        line = head + end
        want = completed_each(line, texts)
        scanned.clear()
        got = completed_by_class(
            line, texts, index.plain, class_map(index.chars, _alive(end, starts))
        )
        assert got == want, text
        if text in (".$ACC", " %(body", " $HO"):  # any word piece extends these
            assert sum(scanned) < len(texts) / 4, text
        other = class_map(index.chars, frozenset(range(len(GROWING))) - _alive(end, starts))
        differ += completed_by_class(line, texts, index.plain, other) != want
    assert differ  # the classes of the live patterns are what makes it exact


def test_a_piece_that_closes_an_icu_argument_is_banned_whatever_the_other_pieces() -> None:
    """Each candidate piece is checked as if alone after the open text: a piece that ends the
    tag around an ICU argument and leaves the argument open (`>`) must not hide the piece
    that completes the argument (`}}`), checked in the same scan after it."""
    texts = ["", "}", " x", "}}", "s", ">", " other", "}>"]
    index = PieceIndex(texts)
    line = ' <a title="{n, plural, one {# file} other {# files'
    state = read(line, open_starts(line))
    assert state is not None and len(state[2]) == 2  # the tag and the argument under way
    found = {v: spans for v, spans, _ in index.completing(*state[:2], list(state[2]))}
    assert found == {
        5: (line[1:] + ">",),
        7: (line[1:] + "}>",),
        3: (line[line.index("{") :] + "}}",),
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    picks=st.lists(st.integers(0, 10**6), max_size=12),
    ok=st.lists(st.sampled_from(ALLOWED), max_size=2),
)
def test_nested_spans_are_banned_as_a_scan_of_the_vocabulary_finds(picks, ok) -> None:
    """On a vocabulary whose rows nest spans (`scripts.tools.ban_hunt.DENSE`), at every step of
    a row that search could write (each piece one the scan allows), the index bans exactly the
    pieces that `find_spans` finds completing a span not allowed, one piece at a time (the
    rest of them are banned after any row: `alone_spans`). Row endings with two runs of a
    character before a span under way, a `%` after a digit, and an address that can grow past
    its punctuation are among them."""
    index = PieceIndex(DENSE)
    allowed, text = tuple(ok), ""
    for pick in [*picks, None]:
        banned = scan(DENSE, text, allowed)
        assert wrong(index, text, allowed, banned) is None
        free = [v for v, t in enumerate(DENSE) if t and v not in banned]
        if pick is None or not free:
            break
        text += DENSE[free[pick % len(free)]]


@pytest.mark.parametrize(
    ("text", "piece", "span"),
    [
        ('x aaaa bbbb <a title="aaaa bbbb $', "HOME", "$HOME"),  # two runs before `$`
        ("1%www", ".de", "www.de"),  # `%` after a digit starts no printf
        ("see www.x.", "de", "www.x.de"),  # an address grows past its full stop
        ("a %%%%%", "%", "%%"),  # the scan pairs a run of `%` from its start
        ("a %%%%%", "(name)s", "%(name)s"),
    ],
)
def test_each_piece_that_completes_a_span_is_banned(text, piece, span) -> None:
    """Row endings whose span under way the index once missed, each with the piece that
    completes it."""
    index = PieceIndex(DENSE + [piece])
    state = read(text, open_starts(text))
    assert state is not None
    found = {v: spans for v, spans, _ in index.completing(*state[:2], list(state[2]))}
    assert found.get(len(DENSE)) == (span,)
