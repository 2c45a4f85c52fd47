"""data.augment: a share of the training pairs in capitals, Title Case, without final
punctuation or with a typo, drawn reproducibly and built into the token store."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mt.config import Config, DataConfig, TokenizerConfig
from mt.config_rules import validate
from mt.data.augment import Augment, modify, title
from mt.data.prepare import prepare
from mt.data.store import TokenStore
from mt.errors import MtError

SRC = [f"Ein Hund {i} rennt über die Wiese." for i in range(2000)]
TGT = [f"A dog {i} runs across the meadow." for i in range(2000)]


def test_each_modifier_changes_both_sides_consistently():
    import random

    rng = random.Random(0)
    assert modify("uppercase", "Ein Hund.", "A dog.", rng) == ("EIN HUND.", "A DOG.")
    assert modify("titlecase", "ein hund rennt", "a dog runs", rng) == (
        "Ein Hund Rennt",
        "A Dog Runs",
    )
    assert modify("no_final_punct", "Ein Hund!", "A dog!", rng) == ("Ein Hund", "A dog")
    assert modify("no_final_punct", "Ein Hund", "A dog.", rng) == ("Ein Hund", "A dog.")
    src, tgt = modify("typos", "Ein Hund rennt", "A dog runs", rng)
    assert tgt == "A dog runs" and src != "Ein Hund rennt"
    assert abs(len(src) - len("Ein Hund rennt")) <= 1  # one letter swapped, dropped or doubled
    assert title("l'eau vive") == "L'Eau Vive"


def test_shares_follow_the_probabilities_and_draws_repeat():
    aug = Augment.from_config(["uppercase:0.1", "no_final_punct:0.2", "typos:0.1"], seed=3)
    assert aug is not None
    src, tgt = aug.apply(SRC, TGT, 0)
    upper = sum(s.isupper() for s in src)
    bare = sum(not s.endswith(".") and not s.isupper() for s in src)
    typos = sum(
        t == TGT[i] and s != SRC[i] and s.endswith(".") for i, (s, t) in enumerate(zip(src, tgt))
    )
    assert 150 <= upper <= 250 and 330 <= bare <= 470 and 150 <= typos <= 250
    assert all(t.isupper() for s, t in zip(src, tgt) if s.isupper())
    # The same pairs in two chunks draw the same: a store built again is the same.
    a = aug.apply(SRC[:700], TGT[:700], 0)
    b = aug.apply(SRC[700:], TGT[700:], 700)
    assert (a[0] + b[0], a[1] + b[1]) == (src, tgt)
    assert Augment.from_config([]) is None


@pytest.mark.parametrize(
    "items, message",
    [
        (["shout:0.1"], "data.augment[0]: 'shout' is not a modifier"),
        (["uppercase"], "data.augment[0] must be MODIFIER:PROBABILITY"),
        (["uppercase:1.5"], "data.augment[0] must be MODIFIER:PROBABILITY"),
        (["uppercase:0.6", "typos:0.6"], "sum to at most 1"),
        (["uppercase:0.1", "uppercase:0.1"], "given twice"),
    ],
)
def test_bad_settings_are_one_line(items, message):
    cfg = Config()
    cfg.data = DataConfig(augment=items)
    with pytest.raises(MtError, match=re.escape(message)):
        validate(cfg)


def test_the_training_store_holds_the_modified_pairs(tmp_path: Path):
    root = tmp_path / "data"
    root.mkdir()
    (root / "train.de").write_text("".join(s + "\n" for s in SRC[:300]), encoding="utf-8")
    (root / "train.en").write_text("".join(t + "\n" for t in TGT[:300]), encoding="utf-8")
    (root / "val.de").write_text("Ein Hund.\n", encoding="utf-8")
    (root / "val.en").write_text("A dog.\n", encoding="utf-8")
    cfg = Config()
    cfg.data = DataConfig(root=str(root), augment=["uppercase:0.5"])
    cfg.tokenizer = TokenizerConfig(vocab_size=60)
    prepared = prepare(cfg.data, cfg.tokenizer, cfg.train.seed, tmp_path / "run", log=False)
    tok = prepared.tokenizer
    store: TokenStore = prepared.train[0]
    want_src, want_tgt = Augment.from_config(["uppercase:0.5"], cfg.train.seed).apply(
        SRC[:300], TGT[:300], 0
    )
    got = [store.pair(i) for i in range(len(store))]
    assert got == list(zip(tok.src.encode(want_src), tok.tgt.encode(want_tgt)))
    assert 100 <= sum(s.isupper() for s in want_src) <= 200
    assert prepared.valid[0].pair(0)[1] == tok.tgt.encode(["A dog."])[0]  # dev set untouched
    cfg.data.augment = []
    plain = prepare(cfg.data, cfg.tokenizer, cfg.train.seed, tmp_path / "run", log=False)
    assert plain.train[0].folder != store.folder  # the settings are in the store's key
