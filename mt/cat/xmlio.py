"""Parsing TMX and XLIFF safely, streamed, with a broken file as one line naming its line.

lxml (libxml2) is told to load no DTD, fetch nothing from the network and expand no entity:
an external entity (XXE: `<!ENTITY x SYSTEM "file:///etc/passwd">`) or a nested one ("billion
laughs") stays an unexpanded reference, and a reference met inside a segment is an error
(`entity_error`), so no file can make `mt` read another file or blow up its memory. Large
files are read with `iterparse` and each unit is cleared once read (`forget`): memory stays
flat however many units a translation memory holds. `.gz` files are read as they are (OPUS
ships its TMX files gzipped).
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from mt.errors import MtError

try:
    from lxml import etree
except ImportError:  # pragma: no cover - the `cat` extra
    raise MtError("TMX and XLIFF files need lxml: pip install 'mt[cat]'") from None

XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
_SAFE = dict(resolve_entities=False, load_dtd=False, no_network=True, huge_tree=False)


def localname(el: Any) -> str:
    """The element's name without its namespace ('' for comments and processing
    instructions, whose `tag` is not a string)."""
    tag = el.tag
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def is_entity(node: Any) -> bool:
    return isinstance(node, etree._Entity)


def entity_error(path: Path | str, node: Any) -> MtError:
    return MtError(
        f"{path}:{node.sourceline or '?'}: entity &{node.name}; inside a segment: mt expands no "
        "DTD entities (a security risk); write the character itself"
    )


def open_xml(path: Path) -> BinaryIO:
    if not path.is_file():
        raise MtError(f"{path}: file not found")
    try:
        f = path.open("rb")
    except OSError as err:
        raise MtError(f"{path}: cannot read ({err.strerror or err})") from None
    if path.suffix == ".gz":
        return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]
    return f


def _syntax(path: Path | str, err: etree.XMLSyntaxError) -> MtError:
    msg = (err.msg or "").split(", line ")[0].strip() or "no element found"
    return MtError(f"{path}:{err.lineno or 1}: not well-formed XML ({msg})")


def events(path: Path) -> Iterator[tuple[str, Any]]:
    """("start" | "end", element) of the whole file, streamed; a file that is not
    well-formed XML, or a damaged `.gz`, ends in one MtError naming `path` and the line."""
    with open_xml(path) as f:
        parser = etree.iterparse(f, events=("start", "end"), remove_comments=True, **_SAFE)
        try:
            yield from parser
        except etree.XMLSyntaxError as err:
            raise _syntax(path, err) from None
        except (OSError, EOFError, zlib.error) as err:
            raise MtError(f"{path}: truncated or damaged ({err})") from None


def forget(el: Any) -> None:
    """Drop a unit read to the end, and the siblings read before it, from the tree that
    iterparse builds: what keeps memory flat on a file of millions of units."""
    el.clear(keep_tail=False)
    parent = el.getparent()
    if parent is not None:
        while el.getprevious() is not None:
            del parent[0]


def parse_document(data: bytes, name: str) -> Any:
    """A whole document as an ElementTree, comments, processing instructions, CDATA and the
    doctype kept (a filled XLIFF file keeps everything but its targets), parsed as safely as
    `events` parses."""
    parser = etree.XMLParser(remove_comments=False, strip_cdata=False, **_SAFE)
    try:
        return etree.ElementTree(etree.fromstring(data, parser))
    except etree.XMLSyntaxError as err:
        raise _syntax(name, err) from None


def document_bytes(tree: Any, declaration: bytes = b"") -> bytes:
    """The document as bytes in its own encoding, with its doctype, and with `declaration`
    (the original's `<?xml ...?>`, kept as written) or lxml's own."""
    encoding = tree.docinfo.encoding or "UTF-8"
    if declaration:
        body = etree.tostring(tree, xml_declaration=False, encoding=encoding)
        out = declaration + b"\n" + body
    else:
        out = etree.tostring(tree, xml_declaration=True, encoding=encoding)
    newline = "a\n".encode(encoding)[len("a".encode(encoding)) :]  # UTF-16's is two bytes
    return out if out.endswith(newline) else out + newline


def declaration_of(data: bytes) -> bytes:
    """The `<?xml ...?>` a document starts with, as written ('' for none, or an encoding
    that is not ASCII-compatible, where lxml writes its own)."""
    m = re.match(rb"(?:\xef\xbb\xbf)?<\?xml[^>]*\?>", data)
    return m.group(0) if m else b""
