"""Which languages the served models read and write, for LibreTranslate's `/languages`,
`/translate` with `source: "auto"` and `/detect`.

A bilingual model serves its one pair; a multilingual model (mt/languages.py) serves every
language it reads into every language it writes, zero-shot directions included. Language
identification uses lingua (the `serve` extra), restricted to the languages served: its models
ship inside the package, so nothing is downloaded while serving. Without it, `auto` and
`/detect` answer one clear 400.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from mt.languages import client_code
from mt.serve.limits import ApiError
from mt.translation.session import Session

NAMES = {
    "de": "German", "en": "English", "fr": "French", "cs": "Czech", "es": "Spanish",
    "it": "Italian", "nl": "Dutch", "pt": "Portuguese", "ru": "Russian", "zh": "Chinese",
}  # fmt: skip


def directions(session: Session) -> dict[str, list[str]]:
    """Source language -> the target languages a session translates it into."""
    langs = session.languages
    if langs is None:
        d = session.cfg.data
        return {d.src_lang: [d.tgt_lang]}
    # Codes as clients send them (an NLLB model's fra_Latn is fr); the model maps them back.
    code = client_code
    return {code(s): [code(t) for t in langs.targets if t != s] for s in langs.languages}


def listing(sessions: list[Session]) -> list[dict[str, Any]]:
    """LibreTranslate's `/languages`: each source language with the targets it has."""
    targets: dict[str, set[str]] = {}
    for session in sessions:
        for src, tgts in directions(session).items():
            targets.setdefault(src, set()).update(tgts)
    return [
        {"code": code, "name": NAMES.get(code, code), "targets": sorted(t)}
        for code, t in targets.items()
    ]


@cache
def _detector(codes: tuple[str, ...]) -> Any:
    try:
        from lingua import IsoCode639_1, LanguageDetectorBuilder
    except ImportError:
        raise ApiError(
            400,
            "language detection needs lingua: pip install 'mt[serve]' (or name the source)",
        ) from None
    isos = []
    for code in codes:
        try:
            isos.append(IsoCode639_1.from_str(code))
        except ValueError:  # a code lingua does not know cannot be detected
            pass
    if len(isos) < 2:  # nothing to choose between: the one language is the answer
        return None
    return LanguageDetectorBuilder.from_iso_codes_639_1(*isos).build()


def detect(text: str, codes: list[str]) -> list[dict[str, Any]]:
    """LibreTranslate's `/detect` answer for `text` among `codes`: best first, confidence
    in percent."""
    detector = _detector(tuple(sorted(codes)))
    if detector is None:
        return [{"language": codes[0], "confidence": 100.0}]
    values = detector.compute_language_confidence_values(text)
    return [
        {"language": v.language.iso_code_639_1.name.lower(), "confidence": round(100 * v.value, 2)}
        for v in values
    ]
