"""sentencepiece tokenizers: train, load, encode, decode, and carry inside a checkpoint.

Ids are fixed (pad 0, unk 1, bos 2, eos 3) so the model and the batching code never have to ask.
A checkpoint stores the serialized model protos, which makes a single `.pt` file enough to
translate raw text.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

from mt.atomic import write_bytes
from mt.config import TokenizerConfig
from mt.errors import MtError
from mt.languages import Languages, lang_piece
from mt.textstats import TextStats
from mt.vocab import PieceTable

PAD, UNK, BOS, EOS = 0, 1, 2, 3
PIECES_FILE = "pieces.json"  # an imported model's piece tables, in a run directory


# TrainerSpec fields of sentencepiece's model proto that change how text is encoded (model type,
# whitespace handling, byte fallback, special ids and the unknown surface); the rest (the input
# corpus path, sizes, threads, seeds) only describe how the model was trained.
_ENCODING_OPTIONS = frozenset({3, 24, 26, 35, 40, 41, 42, 43, 44, 45, 46, 47, 48})


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _proto_fields(data: bytes) -> list[tuple[int, bytes | int]]:
    """The top-level (field number, value) pairs of a protobuf message: varints as ints,
    length-delimited fields as bytes. Enough of the wire format to read a sentencepiece model
    without the protobuf package."""
    out: list[tuple[int, bytes | int]] = []
    i = 0
    while i < len(data):
        tag, i = _varint(data, i)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, i = _varint(data, i)
            out.append((number, value))
        elif wire == 2:
            size, i = _varint(data, i)
            out.append((number, data[i : i + size]))
            i += size
        elif wire in (1, 5):  # fixed 64 / 32 bits (floats)
            width = 8 if wire == 1 else 4
            out.append((number, data[i : i + width]))
            i += width
        else:
            raise ValueError(f"unexpected protobuf wire type {wire}")
    return out


class Tokenizer:
    """A source and a target sentencepiece model (the same object when the vocabulary is joint).

    `pieces` (an imported model's): its source and target piece tables (id -> piece), whose ids
    the model uses instead of sentencepiece's (mt/vocab.py); None for a model mt trained.
    """

    def __init__(
        self,
        src_proto: bytes,
        tgt_proto: bytes | None = None,
        languages: Languages | None = None,
        pieces: tuple[list[str], list[str]] | None = None,
        text_stats: TextStats | None = None,
    ) -> None:
        self.src_proto = src_proto
        # The training text's case table and length bounds (mt/textstats.py), set by data
        # preparation or `mt text-stats` and carried in checkpoints; None: the guesses.
        self.text_stats = text_stats
        # A multilingual model's directions and per-language pieces (mt/languages.py), set by
        # data preparation and carried in checkpoints; None for a bilingual model.
        self.languages = languages
        self.tgt_proto = tgt_proto if tgt_proto is not None else src_proto
        self.joint = tgt_proto is None or tgt_proto == src_proto
        self.src = spm.SentencePieceProcessor(model_proto=self.src_proto)
        self.tgt = (
            self.src if self.joint else spm.SentencePieceProcessor(model_proto=self.tgt_proto)
        )
        self.pieces = pieces
        if pieces is not None:
            src_table = PieceTable(self.src, pieces[0])
            same = pieces[1] is pieces[0] or pieces[1] == pieces[0]
            self.src, self.tgt = (
                src_table,
                src_table if self.joint and same else PieceTable(self.tgt, pieces[1]),
            )

    @property
    def src_vocab_size(self) -> int:
        return self.src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt.get_piece_size()

    def fingerprint(self) -> str:
        """Hash of the model protos; keys the token cache so a new tokenizer never reuses it."""
        h = hashlib.sha256(self.src_proto)
        h.update(self.tgt_proto)
        if self.pieces is not None:
            h.update(repr(self.pieces).encode())
        return h.hexdigest()[:16]

    def vocabulary_key(self) -> str:
        """Hash of what defines the vocabulary and how text is cut into it: the pieces with
        their scores and types, the model type, the normalisation rules and the trainer options
        that encoding reads. Unlike `fingerprint`, two tokenizers trained alike compare equal
        although their protos record different temporary corpus paths."""
        h = hashlib.sha256()
        for proto in (self.src_proto, self.tgt_proto):
            for number, value in _proto_fields(proto):
                if number == 2:  # TrainerSpec: keep only the fields encoding depends on
                    kept = [(n, v) for n, v in _proto_fields(value) if n in _ENCODING_OPTIONS]
                    h.update(repr(kept).encode())
                elif number in (1, 3, 5):  # pieces, normalizer, denormalizer
                    h.update(number.to_bytes(1, "little") + value)
        if self.pieces is not None:
            h.update(repr(self.pieces).encode())
        return h.hexdigest()[:16]

    def lang_id(self, lang: str) -> int:
        """The id of the control piece `<2lang>` (the same in a joint vocabulary's two sides)."""
        i = self.tgt.piece_to_id(lang_piece(lang))
        if i == UNK:
            raise MtError(f"the tokenizer has no language token for {lang!r}")
        return i

    def encode_src(self, lines: list[str]) -> list[list[int]]:
        """Source ids end with EOS, as the encoder sees them."""
        return [ids + [EOS] for ids in self.src.encode(lines)]

    def encode_tgt(self, lines: list[str]) -> list[list[int]]:
        """Target ids without BOS/EOS; batching adds them for the shifted decoder input."""
        return self.tgt.encode(lines)

    def decode_tgt(self, ids: list[int]) -> str:
        return self.tgt.decode([i for i in ids if i > EOS])

    def src_pieces(self, line: str) -> list[str]:
        return self.src.encode(line, out_type=str) + ["</s>"]

    def tgt_pieces(self, ids: list[int]) -> list[str]:
        return [self.tgt.id_to_piece(i) for i in ids]

    def save(self, folder: Path) -> None:
        """Write `spm.model` (joint) or `spm.src.model` + `spm.tgt.model` into a run directory,
        and an imported model's piece tables as `pieces.json`."""
        folder.mkdir(parents=True, exist_ok=True)
        if self.joint:
            write_bytes(folder / "spm.model", self.src_proto, "the tokenizer")
        else:
            write_bytes(folder / "spm.src.model", self.src_proto, "the tokenizer")
            write_bytes(folder / "spm.tgt.model", self.tgt_proto, "the tokenizer")
        if self.pieces is not None:
            text = json.dumps({"src": self.pieces[0], "tgt": self.pieces[1]}, ensure_ascii=False)
            write_bytes(folder / PIECES_FILE, text.encode("utf-8"), "the tokenizer")

    @staticmethod
    def load(folder: Path) -> Tokenizer | None:
        """The tokenizer a run directory already has, or None."""
        tables = folder / PIECES_FILE
        pieces = None
        if tables.is_file():
            data = json.loads(tables.read_text(encoding="utf-8"))
            pieces = (data["src"], data["tgt"])
        joint = folder / "spm.model"
        if joint.is_file():
            return Tokenizer(joint.read_bytes(), None, None, pieces)
        src, tgt = folder / "spm.src.model", folder / "spm.tgt.model"
        if src.is_file() and tgt.is_file():
            return Tokenizer(src.read_bytes(), tgt.read_bytes(), None, pieces)
        return None

    @staticmethod
    def from_stored(tok: dict) -> Tokenizer:
        """The tokenizer a checkpoint's `tokenizer` entry describes (mt.checkpoint.payload)."""
        langs, pieces, text = tok.get("languages"), tok.get("pieces"), tok.get("text")
        return Tokenizer(
            tok["src"],
            tok.get("tgt"),
            Languages.from_dict(langs) if langs else None,
            (pieces[0], pieces[1]) if pieces is not None else None,
            TextStats.from_dict(text) if text else None,
        )


def _train_one(
    lines: Iterable[str],
    cfg: TokenizerConfig,
    seed_text: str,
    reserved: list[str],
    control: list[str] | None = None,
) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        try:
            with corpus.open("w", encoding="utf-8") as f:
                for line in lines:
                    if line:
                        f.write(line.replace("\n", " ") + "\n")
        except OSError as err:
            raise MtError(
                f"{corpus}: cannot write the tokenizer's training sample ({err.strerror or err})"
            ) from None
        prefix = Path(tmp) / "spm"
        try:
            spm.SentencePieceTrainer.train(
                input=str(corpus),
                model_prefix=str(prefix),
                model_type=cfg.type,
                vocab_size=cfg.vocab_size,
                character_coverage=cfg.character_coverage,
                input_sentence_size=cfg.input_sentence_size,
                shuffle_input_sentence=True,
                pad_id=PAD,
                unk_id=UNK,
                bos_id=BOS,
                eos_id=EOS,
                hard_vocab_limit=False,
                num_threads=os.cpu_count() or 1,
                minloglevel=2,
                user_defined_symbols=reserved,
                control_symbols=control or [],
            )
        except RuntimeError as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else "failed"
            raise MtError(f"tokenizer training on {seed_text} failed: {first}") from None
        return (prefix.with_suffix(".model")).read_bytes()


def train_tokenizer(
    src: list[str],
    tgt: list[str],
    cfg: TokenizerConfig,
    reserved: list[str] | None = None,
    languages: list[str] | None = None,
) -> Tokenizer:
    """Train on the training corpus: one model on both sides when joint, else one per side.
    `reserved` pieces (`data.protect`'s placeholders) are whole pieces on both sides;
    `languages` get a control piece `<2xx>` each (a multilingual model, always joint): text
    never produces a control piece, so only the code that asks for a language writes it."""
    r = reserved or []
    if cfg.joint:
        control = [lang_piece(lang) for lang in languages or []]
        return Tokenizer(_train_one(src + tgt, cfg, "source+target text", r, control))
    return Tokenizer(_train_one(src, cfg, "source text", r), _train_one(tgt, cfg, "target text", r))
