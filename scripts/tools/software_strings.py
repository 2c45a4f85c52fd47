"""Build a German->English software-strings set from the .mo files a Debian system ships.

Each German message catalogue (`de/LC_MESSAGES/DOMAIN.mo`) pairs an English `msgid` with its
German `msgstr`; read backwards they are de->en pairs of real UI strings, compiler diagnostics
and game texts, with the placeholders, markup and meta-variables translators keep. Compiled
catalogues drop gettext's flags, so each pair gets the flag xgettext would have written: the
domain's language (C, GCC's diagnostics, Python) and whether its msgid holds a directive of it.

    python -m scripts.tools.software_strings OUT_DIR [--root /usr/share/locale] [--extra DIR]...

Writes OUT_DIR/{train,val,test}.{de,en} (one pair per line) and test.jsonl (`src` and
`format` for `mt translate --input-format jsonl`), split by German source (no source in two
parts), plus domains.tsv (pairs per domain and kind). Nothing of it belongs in the repository:
the catalogues are the packages' (see their licences).

Needs `pip install 'mt[strings]'` (polib). Packages used (apt-get install or apt-get download
+ dpkg-deb -x into an --extra root): gcc-12-locales (compiler), mousepad (desktop), freeciv-data,
gnome-mines, gnome-chess (games); core utilities ship with the base system.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from pathlib import Path

import polib

KINDS = {  # domain -> (kind, language whose directives its strings hold)
    "coreutils": ("core", "c"), "grep": ("core", "c"), "sed": ("core", "c"),
    "tar": ("core", "c"), "findutils": ("core", "c"), "diffutils": ("core", "c"),
    "make": ("core", "c"), "bash": ("core", "c"), "xz": ("core", "c"), "wget": ("core", "c"),
    "procps-ng": ("core", "c"), "psmisc": ("core", "c"), "shadow": ("core", "c"),
    "dpkg": ("core", "c"), "apt": ("core", "c"), "systemd": ("core", "c"), "git": ("core", "c"),
    "gcc-12": ("compiler", "gcc"), "cpplib-12": ("compiler", "gcc"), "ld": ("compiler", "c"),
    "opcodes": ("compiler", "c"), "gprof": ("compiler", "c"), "elfutils": ("compiler", "c"),
    "mousepad": ("desktop", "c"), "gtk30": ("desktop", "c"), "glib20": ("desktop", "c"),
    "freeciv-core": ("game", "c"), "gnome-mines": ("game", "c"), "gnome-chess": ("game", "c"),
    "python-apt": ("python", "python"), "software-properties": ("python", "python"),
    "system-config-printer": ("python", "python"),
}  # fmt: skip
_C = re.compile(
    r"%(?:\d+\$)?[-+ 0#']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGaAcspn]"
)
_GCC = re.compile(r"%[<>]|%(?:\d+\$)?[-+ 0#']*\d*(?:\.\d+)?[qlwhzt]*[A-Za-z]")
_PY = re.compile(r"%\(\w+\)[-+ 0#]*\d*(?:\.\d+)?[a-zA-Z]")
_BRACE = re.compile(r"\{\w*(?:![rsa])?(?::[^{}]*)?\}")
MAX_CHARS = 300  # longer messages (help screens) are documents, not strings


def flags(msgid: str, language: str) -> list[str]:
    """The format flags xgettext would give `msgid` in a program written in `language`."""
    if language == "gcc":
        return ["gcc-internal-format"] if _GCC.search(msgid) else []
    if language == "python":
        out = ["python-format"] if _PY.search(msgid) or _C.search(msgid) else []
        return out + (["python-brace-format"] if _BRACE.search(msgid) else [])
    return ["c-format"] if _C.search(msgid) else []


def one_line(text: str) -> str:
    return " ".join(text.split())


def pairs(path: Path, language: str):
    """(German, English, flags) of one catalogue, plurals as two pairs."""
    for e in polib.mofile(str(path)):
        if not e.msgid:
            continue  # the header
        if e.msgid_plural:
            forms = e.msgstr_plural
            found = [(forms.get(0, ""), e.msgid), (forms.get(1, ""), e.msgid_plural)]
        else:
            found = [(e.msgstr, e.msgid)]
        for de, en in found:
            de, en = one_line(de), one_line(en)
            if de and en and len(de) <= MAX_CHARS and len(en) <= MAX_CHARS:
                yield de, en, flags(en, language)


def part(src: str, test_share: float, val_share: float) -> str:
    """Which part a German source goes to, by its hash (stable across runs and machines)."""
    h = int(hashlib.sha1(src.encode("utf-8")).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "test" if h < test_share else "val" if h < test_share + val_share else "train"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--root", type=Path, default=Path("/usr/share/locale"))
    p.add_argument("--extra", type=Path, action="append", default=[],
                   help="another root holding usr/share/locale (an unpacked .deb)")  # fmt: skip
    p.add_argument("--test-share", type=float, default=0.04)
    p.add_argument("--val-share", type=float, default=0.01)
    args = p.parse_args()
    roots = [args.root] + [r / "usr/share/locale" for r in args.extra]
    seen: set[tuple[str, str]] = set()
    parts: dict[str, list[tuple[str, str, list[str]]]] = {"train": [], "val": [], "test": []}
    counts: dict[str, list] = {}
    for domain, (kind, language) in KINDS.items():
        path = next((r / "de/LC_MESSAGES" / f"{domain}.mo" for r in roots
                     if (r / "de/LC_MESSAGES" / f"{domain}.mo").is_file()), None)  # fmt: skip
        if path is None:
            print(f"missing: {domain}.mo")
            continue
        n = 0
        for de, en, fl in pairs(path, language):
            if (de, en) in seen:
                continue
            seen.add((de, en))
            parts[part(de, args.test_share, args.val_share)].append((de, en, fl))
            n += 1
        counts[domain] = [kind, n]
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in parts.items():
        for lang, k in (("de", 0), ("en", 1)):
            (args.out / f"{name}.{lang}").write_text("".join(r[k] + "\n" for r in rows))
    with open(args.out / "test.jsonl", "w", encoding="utf-8") as f:
        for de, _, fl in parts["test"]:
            f.write(json.dumps({"src": de, "format": fl}, ensure_ascii=False) + "\n")
    (args.out / "domains.tsv").write_text(
        "".join(f"{d}\t{k}\t{n}\n" for d, (k, n) in counts.items())
    )
    print({k: len(v) for k, v in parts.items()}, f"domains {len(counts)}")


if __name__ == "__main__":
    main()
