"""The attention and vectors viewer: one static script and style sheet, and the page around them.

`viewer.js` holds the drawing and documents the data format (`MtViewer.render(element, data)`).
`page` inlines it, the style sheet and the data into one HTML file that needs no network: a
content-security policy forbids every fetch, so the page works the same offline and online. A
server can hand out the same two files (`static_text`) and call the same function with the JSON
of its attention endpoint.
"""

from __future__ import annotations

import html
import json
from importlib import resources
from pathlib import Path

from mt.atomic import write_text

# Inline scripts and styles only; nothing may be fetched (images as data: URLs for screenshots).
CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"


def static_text(name: str) -> str:
    """`viewer.js` or `viewer.css`, as shipped in the package."""
    if name not in ("viewer.js", "viewer.css"):
        raise ValueError(name)
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


def _inline_json(data: dict) -> str:
    """JSON that cannot end its <script> element early (no '<', '>' or '&' left literal)."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page(data: dict, title: str) -> str:
    """One self-contained HTML page that renders `data` with MtViewer."""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>
{static_text("viewer.css")}
</style>
</head>
<body>
<main id="mt-viewer"></main>
<script type="application/json" id="mt-data">{_inline_json(data)}</script>
<script>
{static_text("viewer.js")}
</script>
<script>
MtViewer.render(document.getElementById("mt-viewer"),
                JSON.parse(document.getElementById("mt-data").textContent));
</script>
</body>
</html>
"""


def write_html(path: Path, data: dict, title: str) -> None:
    """Write the page atomically (see mt.atomic)."""
    write_text(Path(path), page(data, title), "the viewer page")
