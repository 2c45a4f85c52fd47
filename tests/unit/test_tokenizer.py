"""sentencepiece tokenizers: training on a real Multi30k slice, ids, round trips, saving."""

from __future__ import annotations

import random

import pytest

from mt.config import DataConfig, TokenizerConfig
from mt.data.corpus import read_parallel
from mt.errors import MtError
from mt.tokenizer import BOS, EOS, PAD, UNK, Tokenizer, train_tokenizer

SLICE = 1000


@pytest.fixture(scope="module")
def multi30k(multi30k_dir) -> tuple[list[str], list[str]]:
    src, tgt = read_parallel(DataConfig(root=str(multi30k_dir)), "train")
    return src[: 2 * SLICE], tgt[: 2 * SLICE]


@pytest.fixture(scope="module")
def joint(multi30k) -> Tokenizer:
    src, tgt = multi30k
    return train_tokenizer(src[:SLICE], tgt[:SLICE], TokenizerConfig(vocab_size=400))


def synthetic(n: int = 200, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    de = "der die das ein hund katze mann frau läuft spielt im park".split()
    en = "the a dog cat man woman runs plays in park on grass".split()
    src = [" ".join(rng.choice(de) for _ in range(rng.randint(2, 8))) for _ in range(n)]
    tgt = [" ".join(rng.choice(en) for _ in range(rng.randint(2, 8))) for _ in range(n)]
    return src, tgt


def normalized(line: str) -> str:
    return " ".join(line.split())  # sentencepiece folds runs of spaces


def test_special_ids_are_fixed(joint):
    assert (PAD, UNK, BOS, EOS) == (0, 1, 2, 3)
    assert [joint.src.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]


def test_trained_vocabulary(joint):
    assert joint.joint and joint.src is joint.tgt
    assert joint.src_vocab_size == joint.tgt_vocab_size == 400
    pieces = {joint.src.id_to_piece(i) for i in range(joint.src_vocab_size)}
    assert {"▁der", "▁the"} <= pieces  # frequent words of both languages are whole pieces


def test_round_trip_on_training_lines(joint, multi30k):
    src, tgt = multi30k
    for lines in (src[:SLICE], tgt[:SLICE]):
        ids = joint.encode_tgt(lines)
        assert all(i > EOS for seq in ids for i in seq)  # every training character has a piece
        assert [joint.decode_tgt(seq) for seq in ids] == [normalized(line) for line in lines]


def test_round_trip_on_held_out_lines(joint, multi30k):
    src, tgt = multi30k
    lines = src[SLICE:] + tgt[SLICE:]
    ids = joint.encode_tgt(lines)
    known = [(line, seq) for line, seq in zip(lines, ids) if UNK not in seq]
    assert len(known) >= 0.95 * len(lines)  # a rare unseen character may become <unk>
    for line, seq in known:
        assert joint.decode_tgt(seq) == normalized(line)


def test_encode_src_ends_with_eos_and_tgt_has_no_specials(joint):
    line = "Ein Hund läuft über eine Wiese."
    src = joint.encode_src([line])[0]
    tgt = joint.encode_tgt([line])[0]
    assert src[-1] == EOS and EOS not in src[:-1]
    assert src[:-1] == tgt
    assert BOS not in tgt and PAD not in tgt
    assert joint.src_pieces(line)[-1] == "</s>"
    assert len(joint.src_pieces(line)) == len(src)
    assert joint.tgt_pieces(tgt) == joint.src_pieces(line)[:-1]


def test_decode_drops_special_ids(joint):
    ids = joint.encode_tgt(["Ein Hund."])[0]
    assert joint.decode_tgt([BOS] + ids + [EOS, PAD, PAD]) == "Ein Hund."


def test_unseen_character_is_unk(joint):
    ids = joint.encode_src(["☃ Hund"])[0]
    assert UNK in ids


def test_separate_vocabularies_and_fingerprint():
    src, tgt = synthetic()
    cfg = TokenizerConfig(vocab_size=30, joint=False)
    tok = train_tokenizer(src, tgt, cfg)
    assert not tok.joint and tok.src is not tok.tgt
    assert tok.src_proto != tok.tgt_proto
    assert tok.decode_tgt(tok.encode_tgt(["the dog runs"])[0]) == "the dog runs"
    joint = train_tokenizer(src, tgt, TokenizerConfig(vocab_size=50))
    assert joint.fingerprint() != tok.fingerprint()
    assert joint.fingerprint() == Tokenizer(joint.src_proto).fingerprint()
    again = train_tokenizer(src, tgt, TokenizerConfig(vocab_size=50))
    assert again.encode_src(src[:20]) == joint.encode_src(src[:20])  # training is deterministic


def test_bpe_type():
    src, tgt = synthetic()
    tok = train_tokenizer(src, tgt, TokenizerConfig(type="bpe", vocab_size=40))
    assert tok.src_vocab_size == 40
    assert tok.decode_tgt(tok.encode_tgt([src[0]])[0]) == src[0]


def test_save_and_load(tmp_path):
    src, tgt = synthetic()
    assert Tokenizer.load(tmp_path) is None
    joint = train_tokenizer(src, tgt, TokenizerConfig(vocab_size=50))
    joint.save(tmp_path / "joint")
    assert sorted(p.name for p in (tmp_path / "joint").iterdir()) == ["spm.model"]
    loaded = Tokenizer.load(tmp_path / "joint")
    assert loaded is not None and loaded.joint
    assert loaded.fingerprint() == joint.fingerprint()
    assert loaded.encode_src(src[:5]) == joint.encode_src(src[:5])

    split = train_tokenizer(src, tgt, TokenizerConfig(vocab_size=30, joint=False))
    split.save(tmp_path / "split")
    names = sorted(p.name for p in (tmp_path / "split").iterdir())
    assert names == ["spm.src.model", "spm.tgt.model"]
    loaded = Tokenizer.load(tmp_path / "split")
    assert loaded is not None and not loaded.joint
    assert loaded.encode_tgt(tgt[:5]) == split.encode_tgt(tgt[:5])


def test_training_on_nothing_is_a_user_error():
    with pytest.raises(MtError, match="tokenizer training on source\\+target text failed"):
        train_tokenizer(["", ""], [""], TokenizerConfig(vocab_size=50))
