"""The languages of a multilingual model: its directions, its language tokens, and the pieces
each target language is allowed to write.

One model for many directions is the bilingual model plus one reserved piece per language,
`<2fr>`, that says which language to write (Johnson et al. 2017): before the source
(`data.lang_token: source`, as Marian) or as the decoder's first token (`target`, as M2M and
NLLB). The pieces are sentencepiece control symbols, so no text can produce them and they are
never split. A bilingual model has no `Languages`; its pair is `data.src_lang`/`data.tgt_lang`.

Zero-shot directions (de->fr from a model trained on de<->en and en<->fr) drift into the wrong
language. `counts` records, for each language, how often each piece occurs in its training
text; decoding for a language emits only the pieces that are its own (mt/translation/target.py):
seen in its text, and not far more frequent in another language's text than in its own. A
French caption that names a "house" once must not license `▁house` for every French output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mt.errors import MtError

# NLLB's codes (ISO 639-3 and script) -> the ISO 639-1 codes LibreTranslate clients send, for
# the languages that have one (zt: LibreTranslate's traditional Chinese).
ISO_639_1 = dict(
    pair.split(":")
    for pair in (
        "afr_Latn:af amh_Ethi:am arb_Arab:ar azj_Latn:az bel_Cyrl:be ben_Beng:bn bos_Latn:bs "
        "bul_Cyrl:bg cat_Latn:ca ces_Latn:cs cym_Latn:cy dan_Latn:da deu_Latn:de ell_Grek:el "
        "eng_Latn:en epo_Latn:eo est_Latn:et eus_Latn:eu fin_Latn:fi fra_Latn:fr gle_Latn:ga "
        "glg_Latn:gl guj_Gujr:gu hau_Latn:ha heb_Hebr:he hin_Deva:hi hrv_Latn:hr hun_Latn:hu "
        "hye_Armn:hy ibo_Latn:ig ind_Latn:id isl_Latn:is ita_Latn:it jav_Latn:jv jpn_Jpan:ja "
        "kat_Geor:ka kaz_Cyrl:kk khm_Khmr:km kan_Knda:kn kor_Hang:ko lao_Laoo:lo lit_Latn:lt "
        "lvs_Latn:lv mal_Mlym:ml mar_Deva:mr mkd_Cyrl:mk mlt_Latn:mt mya_Mymr:my nld_Latn:nl "
        "nob_Latn:nb npi_Deva:ne pan_Guru:pa pes_Arab:fa pol_Latn:pl por_Latn:pt ron_Latn:ro "
        "rus_Cyrl:ru slk_Latn:sk slv_Latn:sl som_Latn:so spa_Latn:es srp_Cyrl:sr swe_Latn:sv "
        "swh_Latn:sw tam_Taml:ta tel_Telu:te tha_Thai:th tgl_Latn:tl tur_Latn:tr ukr_Cyrl:uk "
        "urd_Arab:ur vie_Latn:vi xho_Latn:xh yor_Latn:yo zho_Hans:zh zho_Hant:zt zsm_Latn:ms "
        "zul_Latn:zu als_Latn:sq khk_Cyrl:mn uzn_Latn:uz kir_Cyrl:ky tgk_Cyrl:tg"
    ).split()
)


def client_code(code: str) -> str:
    """The code a LibreTranslate client sends for a model's language (`fra_Latn` -> `fr`)."""
    return ISO_639_1.get(code, code)


def lang_piece(lang: str) -> str:
    """The reserved piece that asks for output in `lang`."""
    return f"<2{lang}>"


@dataclass
class Languages:
    pairs: list[tuple[str, str]]  # the trained directions, as in data.pairs
    placement: str  # "source" or "target" (data.lang_token)
    counts: dict[str, bytes]  # language -> int64 occurrences of each piece in its text
    always: list[int]  # pieces allowed in every language: EOS and reserved span pieces

    @property
    def languages(self) -> list[str]:
        """Every language the model reads or writes, in the order data.pairs names them."""
        seen: dict[str, None] = {}
        for s, t in self.pairs:
            seen.setdefault(s)
            seen.setdefault(t)
        return list(seen)

    @property
    def sources(self) -> list[str]:
        return list(dict.fromkeys(s for s, _ in self.pairs))

    @property
    def targets(self) -> list[str]:
        return list(dict.fromkeys(t for _, t in self.pairs))

    def allowed(self, lang: str, ratio: float) -> np.ndarray:
        """(V,) bool: the pieces `lang` may write. A piece is `lang`'s when its text holds it
        and its rate there is at least `ratio` times its highest rate in another language
        (0: every piece seen), plus EOS and the reserved span pieces."""
        rates = {k: np.frombuffer(v, np.int64) for k, v in self.counts.items()}
        own = rates[lang]
        mask = own > 0
        others = [r / max(r.sum(), 1) for k, r in rates.items() if k != lang]
        if ratio > 0 and others:
            mask &= own / max(own.sum(), 1) >= ratio * np.max(others, axis=0)
        mask[self.always] = True
        return mask

    def zero_shot(self, src: str, tgt: str) -> bool:
        return (src, tgt) not in self.pairs

    def canonical(self, code: str | None) -> str | None:
        """The model's own code for `code`: itself, or the one language whose client code it
        is (`fr` for an NLLB model's `fra_Latn`)."""
        if code is None or code in self.languages:
            return code
        aliases = [lang for lang in self.languages if client_code(lang) == code]
        return aliases[0] if len(aliases) == 1 else code

    def check(self, to: str | None, frm: str | None, where: str = "--to") -> str:
        """The target language for a request (`to`, or the only one the model writes), with
        `frm` (optional) checked against the languages the model reads; one line otherwise."""
        to, frm = self.canonical(to), self.canonical(frm)
        names = ", ".join(self.languages)
        if frm is not None and frm not in self.sources:
            if frm in self.languages:
                # A language seen only as a target is still readable text for the encoder
                # (the joint vocabulary covers it): allowed, as a zero-shot source.
                pass
            else:
                raise MtError(f"the model does not read {frm!r} (its languages: {names})")
        if to is None:
            if len(self.targets) == 1:
                return self.targets[0]
            raise MtError(
                f"this model writes {', '.join(self.targets)}: say which with {where} "
                f"(its directions: {self.describe_pairs()})"
            )
        if to not in self.targets:
            raise MtError(f"the model does not write {to!r} (it writes {', '.join(self.targets)})")
        if frm is not None and frm == to:
            raise MtError(f"source and target language are both {to!r} (its languages: {names})")
        return to

    def describe_pairs(self) -> str:
        if len(self.pairs) > 12:  # an imported M2M/NLLB model: every direction
            return f"{len(self.pairs):,} directions among {len(self.languages)} languages"
        return ", ".join(f"{s}-{t}" for s, t in self.pairs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pairs": [f"{s}-{t}" for s, t in self.pairs],
            "placement": self.placement,
            "counts": dict(self.counts),
            "always": list(self.always),
        }

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Languages:
        pairs = [tuple(p.split("-")) for p in data["pairs"]]
        return Languages(
            pairs,  # type: ignore[arg-type]
            data["placement"],
            dict(data["counts"]),
            list(data["always"]),
        )
