"""Whole documents translated with their formatting kept: .txt, .html, .srt and .docx.

What `/translate_file` (LibreTranslate's route) does with an uploaded file. Each format is
reduced to the texts a translator takes, translated in one call (so they share batches), and
written back in place:

- .txt: every line (its ending kept), sentence by sentence;
- .html: the text between block tags (`<p>`, `<li>`, `<td>`, `<h1>`, `<br>` ...) is one
  fragment: without tags, text (sentence by sentence: a `<p>` often holds a paragraph); with
  inline tags, translated by the HTML path (tags put back by alignment, attributes, `<script>`
  and `<style>` never translated); a fragment whose inline tags do not nest has its text
  pieces translated one by one;
- .srt (the `srt` library): each subtitle's text, its numbering and timing kept, written on as
  many lines as it had;
- .docx (python-docx): each paragraph of the body, its tables, headers and footers; a
  paragraph whose runs differ in formatting (a bold word) goes through the HTML path with one
  tag per run, so the formatting stays on the words it was on.

`translate_text(texts)` and `translate_html(fragments)` are the caller's (the server's worker
binds them to its translator): this module knows formats, not models.
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Callable

from mt.errors import MtError

SUFFIXES = (".txt", ".html", ".srt", ".docx")
Translate = Callable[[list[str]], list[str]]

BLOCK = {"address", "article", "aside", "blockquote", "body", "br", "caption", "dd", "div", "dl"}
BLOCK |= {"dt", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6"}
BLOCK |= {"head", "header", "hr", "html", "li", "main", "nav", "ol", "option", "p", "pre"}
BLOCK |= {"section", "table", "tbody", "td", "tfoot", "th", "thead", "title", "tr", "ul"}
_TAG = re.compile(r"<!--.*?-->|<![^>]*>|<\?[^>]*>|</?([a-zA-Z][^\s/>]*)[^>]*>", re.S)
_RUN_TAG = re.compile(r"<(/?)r(\d+)>")


def translate_document(
    data: bytes, suffix: str, translate_text: Translate, translate_html: Translate
) -> bytes:
    """The document `data` (a file ending in `suffix`) translated, in the same format."""
    if suffix == ".docx":
        return _docx(data, translate_text, translate_html)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise MtError(f"the {suffix} file is not UTF-8 (byte {err.start})") from None
    if suffix == ".txt":
        return _txt(text, translate_text).encode("utf-8")
    if suffix == ".html":
        return _html(text, translate_text, translate_html).encode("utf-8")
    if suffix == ".srt":
        return _srt(text, translate_text).encode("utf-8")
    raise MtError(f"cannot translate {suffix} files (these: {', '.join(SUFFIXES)})")


def _fill(texts: list[str], translate: Translate) -> list[str]:
    """`translate` on the texts that hold something; blank ones come back as they are."""
    todo = [i for i, t in enumerate(texts) if t.strip()]
    done = translate([texts[i] for i in todo]) if todo else []
    out = list(texts)
    for i, t in zip(todo, done):
        out[i] = t
    return out


def _txt(text: str, translate: Translate) -> str:
    lines = text.splitlines(keepends=True)
    bodies = [line.rstrip("\r\n") for line in lines]
    done = _fill(bodies, translate)
    return "".join(t + line[len(b) :] for t, b, line in zip(done, bodies, lines))


def _html(text: str, translate_text: Translate, translate_html: Translate) -> str:
    """Cut at block tags; each run between them, its edge spaces aside, is one fragment."""
    pieces: list[tuple[bool, str]] = []  # (translatable run, raw)
    pos, run_start = 0, 0
    for m in _TAG.finditer(text):
        if m.start() < pos:  # inside a <script>/<style> already taken
            continue
        name = (m.group(1) or "").lower()
        if name in ("script", "style") and not m.group(0).startswith("</"):
            close = re.compile(rf"</{name}\s*>", re.I).search(text, m.end())
            end = close.end() if close else len(text)
        elif name in BLOCK or not name:  # a block tag, comment or declaration
            end = m.end()
        else:
            continue  # inline: part of the run
        pieces.append((True, text[run_start : m.start()]))
        pieces.append((False, text[m.start() : end]))
        pos = run_start = end
    pieces.append((True, text[run_start:]))
    runs = [raw for keep, raw in pieces if keep]
    cores = [" ".join(r.split()) for r in runs]
    done = _fill(cores, lambda frags: translate_fragments(frags, translate_text, translate_html))
    out, k = [], 0
    for keep, raw in pieces:
        if not keep:
            out.append(raw)
            continue
        core = runs[k].strip()
        lead = runs[k][: len(runs[k]) - len(runs[k].lstrip())]
        trail = runs[k][len(lead) + len(core) :]
        out.append(lead + done[k] + trail if core else runs[k])
        k += 1
    return "".join(out)


def translate_fragments(frags: list[str], translate_text: Translate, translate_html: Translate):
    """Fragments without tags go the text way (sentence by sentence: a `<p>` often holds a
    paragraph), their entities decoded and encoded again; the others the HTML way."""
    plain = [i for i, f in enumerate(frags) if not _TAG.search(f)]
    tagged = [i for i, f in enumerate(frags) if _TAG.search(f)]
    out = [""] * len(frags)
    texts = translate_text([html.unescape(frags[i]) for i in plain]) if plain else []
    for i, t in zip(plain, texts):
        out[i] = html.escape(t, quote=False)
    done = _tagged([frags[i] for i in tagged], translate_text, translate_html) if tagged else []
    for i, t in zip(tagged, done):
        out[i] = t
    return out


def _tagged(frags: list[str], translate_text: Translate, translate_html: Translate) -> list[str]:
    try:
        return translate_html(frags)
    except MtError:  # some fragment's inline tags do not nest: text pieces one by one
        pass
    out = []
    for frag in frags:
        try:
            out.extend(translate_html([frag]))
        except MtError:
            parts = _TAG.split(frag)
            tags = [m.group(0) for m in _TAG.finditer(frag)]
            texts = [p for i, p in enumerate(parts) if i % (1 + _TAG.groups) == 0]
            done = _fill([html.unescape(t) for t in texts], translate_text)
            out.append("".join(html.escape(d, quote=False) + t for d, t in zip(done, tags + [""])))
    return out


def _srt(text: str, translate: Translate) -> str:
    import srt

    try:
        subs = list(srt.parse(text))
    except srt.SRTParseError as err:
        raise MtError(f"not an SRT file ({err})") from None
    lines = [s.content.splitlines() or [""] for s in subs]
    done = _fill([" ".join(x.strip() for x in ls) for ls in lines], translate)
    for sub, ls, t in zip(subs, lines, done):
        sub.content = "\n".join(rewrap(t, len(ls)))
    return srt.compose(subs, reindex=False)


def rewrap(text: str, n: int) -> list[str]:
    """`text` on `n` lines (at most one per word), each break at the word end nearest to an
    even share of the characters."""
    words = text.split()
    n = min(n, len(words))
    if n <= 1:
        return [text]
    ends = [len(" ".join(words[: i + 1])) for i in range(len(words))]
    total, cuts, prev = ends[-1], [], -1
    for k in range(1, n):
        room = range(prev + 1, len(words) - (n - k))  # a word left for every later line
        prev = min(room, key=lambda i: abs(ends[i] - k * total / n))
        cuts.append(prev)
    bounds = [-1, *cuts, len(words) - 1]
    return [" ".join(words[a + 1 : b + 1]) for a, b in zip(bounds, bounds[1:])]


def _docx(data: bytes, translate_text: Translate, translate_html: Translate) -> bytes:
    try:
        import docx
    except ImportError:
        raise MtError(".docx files need python-docx: pip install 'mt[serve]'") from None
    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as err:  # noqa: BLE001 - python-docx raises several kinds on bad files
        raise MtError(f"not a .docx file ({type(err).__name__})") from None
    paragraphs = [p for p in _paragraphs(document) if p.text.strip()]
    plain = [p for p in paragraphs if _one_format(p)]
    mixed = [p for p in paragraphs if not _one_format(p)]
    for p, t in zip(plain, _fill([p.text for p in plain], translate_text)):
        _set_runs(p, [t])
    frags = [
        "".join(f"<r{k}>{html.escape(r.text, quote=False)}</r{k}>" for k, r in enumerate(p.runs))
        for p in mixed
    ]
    for p, t in zip(mixed, translate_fragments(frags, translate_text, translate_html)):
        _set_runs(p, _run_texts(t, len(p.runs)))
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _paragraphs(document):  # noqa: ANN001, ANN202 - python-docx objects
    """Every paragraph: the body's, its tables' (nested too), and the sections' headers and
    footers'."""

    def walk(container):  # noqa: ANN001, ANN202
        yield from container.paragraphs
        for table in getattr(container, "tables", []):
            for row in table.rows:
                for cell in row.cells:
                    yield from walk(cell)

    yield from walk(document)
    for section in document.sections:
        for part in (section.header, section.footer):
            if not part.is_linked_to_previous:
                yield from walk(part)


def _one_format(p) -> bool:  # noqa: ANN001
    runs = [r for r in p.runs if r.text]
    if len(runs) != len(p.runs) or not runs:  # fields, images: keep the runs
        return len(runs) <= 1
    first = runs[0]._r.rPr
    key = first.xml if first is not None else ""
    return all((r._r.rPr.xml if r._r.rPr is not None else "") == key for r in runs)


def _set_runs(p, texts: list[str]) -> None:  # noqa: ANN001
    """Text k into the k-th run that had text (the rest emptied; their formatting stays)."""
    runs = [r for r in p.runs if r.text] or list(p.runs)
    for k, run in enumerate(runs):
        run.text = texts[k] if k < len(texts) else ""


def _run_texts(translated: str, n: int) -> list[str]:
    """The text of each run from a translated `<r0>...</r0><r1>...` fragment: text outside any
    tag goes to the run before it (the first run at the start)."""
    texts = [""] * n
    current, pos = 0, 0
    for m in _RUN_TAG.finditer(translated):
        texts[current] += html.unescape(translated[pos : m.start()])
        k = int(m.group(2))
        if k < n and not m.group(1):
            current = k
        pos = m.end()
    texts[current] += html.unescape(translated[pos:])
    return texts
