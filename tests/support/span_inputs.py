"""Inputs made to hold protected spans, which the span tests and the span benchmarks, fuzzer
and hunt share, so that a test checks the very lines a benchmark's figures count:

- `inject_text`: a sentence with spans of one kind put in at word boundaries (`SPANS`, `KINDS`):
  the lines of scripts/bench/protect.py and bans.py, and of the protect tests;
- `fuzz_line`: a random line of nested tags, empty elements, entities and placeholders: the
  lines of scripts/tools/fuzz_spans.py, and of tests/unit/test_fuzz.py under hypothesis;
- `DENSE`, `ALLOWED`: a vocabulary whose pieces nest spans of every syntax, and spans a sentence
  may be allowed: what scripts/tools/ban_hunt.py and the span-ban tests search over.
"""

from __future__ import annotations

import random
import re

# -- spans injected into sentences --------------------------------------------------------------

SPANS = {
    "printf": ["%s", "%d", "%3d", "%1$s", "%(name)s", "%-5.2f", "%lld"],
    "brace": ["{0}", "{1}", "{name}", "{user.name}"],
    "shell": ["$HOME", "${PATH}", "$USER"],
    "entity": ["&amp;", "&#169;", "&quot;", "&gt;"],
    "url": ["https://inkscape.org/de/", "http://example.com/a?b=1&c=2", "www.debian.org"],
    "email": ["help@example.org", "ana.b+x@mail.example.de"],
    "tag": ["<b>", "<i>", '<a href="https://inkscape.org/de/">'],
    "self-closing": ["<br/>", '<img src="logo.png" alt="Logo"/>'],
}
KINDS = list(SPANS)


def inject_text(line: str, k: int, rng: random.Random) -> tuple[str, list[str]]:
    """`line` with spans of kind `KINDS[k % len]` at word boundaries, and the spans put in."""
    kind = KINDS[k % len(KINDS)]
    words = line.split()
    spans: list[str] = []
    for _ in range(1 + k % 2):
        if kind == "tag":
            i = rng.randrange(len(words))
            open_ = rng.choice(SPANS["tag"])
            close = "</" + re.match(r"<(\w+)", open_).group(1) + ">"  # type: ignore[union-attr]
            words[i] = open_ + words[i] + close
            spans += [open_, close]
        else:
            span = spans[0] if spans and rng.random() < 0.3 else rng.choice(SPANS[kind])
            words.insert(rng.randrange(len(words) + 1), span)
            spans.append(span)
    return " ".join(words), spans


# -- fuzzed lines -------------------------------------------------------------------------------

FUZZ_WORDS = ["Datei", "Ein", "Hund", "läuft", "öffnen", "Einträge", "Kosten", "zur", "der",
              "und", "Einberufung", "nicht", "gefunden", "Fehler", "Spieler", "zwei", "im",
              "Park"]  # fmt: skip
FUZZ_SPANS = ["%s", "%d", "%1$s", "%-5.2f", "%%", "%(name)s", "%{user}", "{0}", "{name}",
              "{{title}}", "{0:>8}", "$HOME", "${VAR}", "$color", "&amp;", "&#169;", "&lt;",
              "https://x.de/a?b=1", "www.x.org", "ana@b.de", "%1", "%L2", "%qE", "%wu",
              "{n, plural, one {# Datei} other {# Dateien}}"]  # fmt: skip
TEXT_ONLY = ["<%= x %>", "<Pfad>", "%<", "%>", "a < b", "%<count>d"]  # not well-formed HTML
PUNCT = [".", ",", ":", ";", "!", "?", "(", ")", "»", "«", "'", '"', "-", "/", "…"]
TAGS = ["b", "i", "u", "em", 'span color="$color"', 'a href="URL"', 'a href="https://x.de"']
VOIDS = ["<br/>", "<br>", '<img src="x.png"/>', "<hr>"]


def fuzz_line(rng: random.Random, html: bool = False, depth: int = 0) -> str:
    """One random line (or an element's content, below depth 0): 0 to 7 items, glued or
    spaced at random."""
    out = ""
    for _ in range(rng.randint(0, 7 if depth == 0 else 3)):
        kind = rng.random()
        if kind < 0.3:
            item = rng.choice(FUZZ_WORDS)
        elif kind < 0.55:
            item = rng.choice(FUZZ_SPANS + ([] if html else TEXT_ONLY))
        elif kind < 0.7:
            item = rng.choice(PUNCT)
        elif kind < 0.92 and depth < 3:
            tag = rng.choice(TAGS)
            inner = fuzz_line(rng, html, depth + 1)
            item = f"<{tag}>{inner}</{tag.split()[0]}>"
        else:
            item = rng.choice(VOIDS)
        out += ("" if rng.random() < 0.35 else " ") + item
    return out.strip() if depth == 0 else out


# -- a vocabulary of nested spans ---------------------------------------------------------------

# Pieces of every syntax and the words around them, some whole spans under way.
DENSE = ["", "}", "}}", "{", "{n, plural, ", "one {#", " other {# x", ">", "}>", "<a", ' title="',
         "%", "s", "d", "0", ".", "2", "<", "b", "/", "$", "HOME", " ", "x", "&", "amp", ";",
         "@", "ex", ".de", "www", "http", "://", "</b>", "<Pfad", "</Pfad>", "{0", "{{", "name",
         "<%", "%>", "=", "1", "(", ")", ' <a title="{n, plural, one {#} other {#', "%<",
         "<%=", "&#", "x1", "ftp", "{{ ", " }}", "-", "5", "%1$", "%L", "hh", "ll", "%(", "%{",
         "#x", "A9", "https", '"', "'", "/>", "</", "!r", ":>8", "[0]", "%%", "%-5.2", "q",
         "E", "+", "select", ",", ", ", "{d, date, short}", "<br", "a@b", "ex.com"]  # fmt: skip
ALLOWED = ["%s", "<b>", "$HOME", "{0}", "&amp;", "www.de"]  # spans a sentence may be allowed
