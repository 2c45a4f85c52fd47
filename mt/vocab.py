"""A sentencepiece model seen through an imported model's piece table.

A model `mt` trained numbers its vocabulary as its sentencepiece model does. An imported one
(mt/hub: HF Marian, M2M-100, NLLB) has a table of its own: Marian's `vocab.json` over two
sentencepiece models, the fairseq dictionary of M2M/NLLB (sentencepiece's pieces shifted, with
language tokens after them). Its text is cut into pieces by sentencepiece and each piece is
looked up in the table, as HF's tokenizers do; a piece the table lacks is UNK.

`PieceTable` offers the methods of `sentencepiece.SentencePieceProcessor` that mt calls, in
the table's ids, so every caller of `Tokenizer.src` / `Tokenizer.tgt` works unchanged.
"""

from __future__ import annotations

from typing import Any

import sentencepiece as spm

# mt's fixed ids (mt.tokenizer: PAD, UNK, BOS, EOS), repeated here to keep imports one-way.
PAD, UNK, BOS, EOS = 0, 1, 2, 3


class PieceTable:
    """`sp` with ids of `pieces` (id -> piece; ids 0-3 are PAD, UNK, BOS, EOS)."""

    def __init__(self, sp: spm.SentencePieceProcessor, pieces: list[str]) -> None:
        self.sp, self.pieces = sp, pieces
        self.index: dict[str, int] = {}
        for i, piece in enumerate(pieces):
            self.index.setdefault(piece, i)  # the special ids first: they win a shared name
        own = sp.get_piece_size()
        spm_id = [sp.piece_to_id(p) for p in pieces]
        self._spm_id = spm_id
        # A piece sentencepiece does not have (the specials, language tokens) is no text.
        self._control = [
            i <= EOS or j >= own or sp.id_to_piece(j) != p or sp.is_control(j)
            for i, (p, j) in enumerate(zip(pieces, spm_id))
        ]
        self._byte = [not c and sp.is_byte(j) for c, j in zip(self._control, spm_id)]

    def get_piece_size(self) -> int:
        return len(self.pieces)

    def id_to_piece(self, i: int) -> str:
        return self.pieces[i]

    def piece_to_id(self, piece: str) -> int:
        return self.index.get(piece, UNK)

    def is_control(self, i: int) -> bool:
        return self._control[i] and i != UNK

    def get_score(self, i: int) -> float:
        """sentencepiece's score of the piece (recasing ranks spellings by it); 0 for a piece
        that is no text."""
        return 0.0 if self._control[i] else self.sp.get_score(self._spm_id[i])

    def is_unknown(self, i: int) -> bool:
        return i == UNK

    def is_byte(self, i: int) -> bool:
        return self._byte[i]

    def _ids(self, pieces: list[str]) -> list[int]:
        return [self.index.get(p, UNK) for p in pieces]

    def encode(self, text: Any, out_type: Any = int, **options: Any) -> Any:
        """Pieces (`out_type=str`) or table ids of a line or a list of lines; other return
        types (the proto with byte offsets) are sentencepiece's, whose pieces are the same."""
        if "return_type" in options:
            return self.sp.encode(text, **options)
        if out_type is not int:
            return self.sp.encode(text, out_type=out_type, **options)
        pieces = self.sp.encode(text, out_type=str, **options)
        if isinstance(text, str):
            return self._ids(pieces)
        return [self._ids(p) for p in pieces]

    def decode(self, ids: list[int]) -> str:
        """Text of table ids; control pieces (specials, language tokens) write nothing.

        Stripped as HF's Marian and M2M-100 tokenizers strip their decoded text: a model that
        ends on word-boundary pieces would otherwise write trailing spaces HF does not."""
        return self.sp.decode_pieces([self.pieces[i] for i in ids if not self._control[i]]).strip()
