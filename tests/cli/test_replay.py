"""`finetune.replay_sources`: the base of `--init-from` (the tiny trained model of the fixtures)
translates general source text once, with `mt distill`'s machinery, and the pairs train beside
the domain's corpus at `finetune.replay_weight`. The replayed corpus is what `mt translate`
writes with the base and the same beam, it is in the run's data and checkpoints, a resumed run
translates nothing, and bad settings are one line before anything is translated."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
import yaml

from mt.checkpoint import load

LINES = 50  # replay sources: German lines of Multi30k's val, English side never read


def finetune_config(folder: Path, **finetune: object) -> Path:
    """4 updates on 60 Multi30k train pairs (the 'domain'), with `finetune` as the section."""
    cfg = {
        "data": {"max_train_examples": 60, "max_valid_examples": 20},
        "train": {"run_dir": str(folder / "run"), "max_steps": 4, "eval_every": 4,
                  "log_every": 2, "threads": 1, "warmup": 2, "eval_bleu": False},
        "finetune": finetune,
    }  # fmt: skip
    path = folder / "finetune.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def replayed(tiny_run, multi30k_dir, tmp_path_factory):
    """A fine-tune of the tiny model with 50 German lines replayed at weight 0.5."""
    folder = tmp_path_factory.mktemp("replay")
    with gzip.open(multi30k_dir / "val.de.gz", "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(LINES)]
    sources = folder / "general.de.gz"
    with gzip.open(sources, "wt", encoding="utf-8") as f:
        f.writelines(lines)
    config = finetune_config(folder, replay_sources=str(sources), replay_weight=0.5)
    env = {"MT_DATA": str(multi30k_dir)}
    from support.inprocess import run_mt_here

    base = tiny_run / "best.pt"
    result = run_mt_here("train", config, "--init-from", base, env=env)
    assert result.rc == 0, result.err
    return folder, config, env, result.err, [s.rstrip("\n") for s in lines]


def the_corpus(run: Path) -> Path:
    (folder,) = [p for p in (run / "replay").iterdir() if p.is_dir()]
    return folder


def test_the_replayed_corpus_is_what_the_base_translates(replayed, tiny_run, mt_cli):
    """By default with a beam of 5, as `mt translate --beam 5` writes it."""
    folder, _, env, err, lines = replayed
    corpus = the_corpus(folder / "run")
    assert (corpus / "text.de").read_text(encoding="utf-8").splitlines() == lines
    tgt = (corpus / "text.en").read_text(encoding="utf-8").splitlines()
    assert len(tgt) == LINES and sum(bool(t) for t in tgt) > LINES * 0.9
    assert f"translating {LINES} of {LINES} lines" in err and "beam 5" in err
    out = folder / "translate.en"
    args = ["translate", tiny_run / "best.pt", "--input", corpus / "text.de", "-o", out]
    result = mt_cli(*args, "--beam", "5", "--device", "cpu", env=env)
    assert result.rc == 0, result.err
    assert out.read_bytes() == (corpus / "text.en").read_bytes()


def test_the_pairs_train_beside_the_domain_at_the_weight(replayed, tiny_run, multi30k_dir):
    folder, _, _, err, _ = replayed
    run = folder / "run"
    corpus = the_corpus(run)
    assert f"{corpus}/text.de: {LINES} pairs read" in err  # the replayed corpus was prepared
    best = load(run / "best.pt")
    domain = {"name": "train", "root": str(multi30k_dir), "format": "text", "hf_subset": ""}
    assert best["config"]["data"]["corpora"] == [
        {**domain, "weight": 1.0, "general": False},
        {
            "name": "text", "root": str(corpus), "format": "text", "hf_subset": "", "weight": 0.5,
            "general": True,  # what finetune.keep_on: general applies the KL term to
        },
    ]  # fmt: skip
    record = best["origin"]["replay"]
    assert record["lines"] == LINES and record["weight"] == 0.5 and record["beam"] == 5
    assert record == json.loads((run / "replay.json").read_text(encoding="utf-8"))["replay"]
    # finetune.keep: auto, the default: a full fine-tune that self-replays adds the KL term
    # toward the base on the replayed pairs, at the measured weight
    said = "finetune.keep: auto: kl (weight 2, on the general corpora's pairs) toward the frozen"
    assert said in err
    records = [json.loads(r) for r in (run / "metrics.jsonl").read_text("utf-8").splitlines()]
    assert [r["keep_kl"] >= 0 for r in records if "loss" in r] == [True, True]
    from mt.distill import teacher_fingerprint

    assert record["base"] == teacher_fingerprint(load(tiny_run / "best.pt"))
    assert best["step"] == 4


def test_a_resumed_run_translates_nothing(replayed, mt_cli):
    folder, config, env, _, _ = replayed
    corpus = the_corpus(folder / "run")
    before = (corpus / "text.en").stat().st_mtime_ns
    result = mt_cli("train", config, "--resume", "--set", "train.max_steps=6", env=env)
    assert result.rc == 0, result.err
    assert f"{LINES} lines translated before, in {corpus}" in result.err
    assert "translating" not in result.err
    assert (corpus / "text.en").stat().st_mtime_ns == before
    assert load(folder / "run" / "last.pt")["step"] == 6
    saved = yaml.safe_load((folder / "run" / "config.yaml").read_text(encoding="utf-8"))
    assert len(saved["data"]["corpora"]) == 2  # the replayed corpus once, not again


def test_the_kl_term_on_the_replayed_pairs_alone(replayed, tiny_run, tmp_path, mt_cli):
    """`finetune.keep: kl` with `keep_on: general`: the term is logged where batches hold
    replayed pairs, and it is smaller than the same term on every pair."""
    folder, _, env, _, _ = replayed
    kl = {}
    for on in ("general", "all"):
        sources = str(folder / "general.de.gz")
        (tmp_path / on).mkdir()
        config = finetune_config(
            tmp_path / on, replay_sources=sources, replay_weight=0.5, keep="kl", keep_on=on
        )
        shutil.copytree(folder / "run" / "replay", tmp_path / on / "run" / "replay")
        result = mt_cli("train", config, "--init-from", tiny_run / "best.pt", env=env)
        assert result.rc == 0, result.err
        assert "translating" not in result.err  # the copied translation serves
        said = "finetune.keep: kl (weight 2, on the general corpora's pairs)"  # its default
        assert (said in result.err) == (on == "general"), result.err
        records = (tmp_path / on / "run" / "metrics.jsonl").read_text(encoding="utf-8")
        kl[on] = [r["keep_kl"] for r in map(json.loads, records.splitlines()) if "keep_kl" in r]
    assert len(kl["general"]) == len(kl["all"]) == 2  # a record each 2 of the 4 updates
    assert all(v >= 0 for v in kl["general"]) and sum(kl["general"]) > 0
    assert sum(kl["general"]) < sum(kl["all"])


def test_mt_prepare_translates_and_mt_train_finds_it(replayed, tiny_run, tmp_path, mt_cli):
    """`mt prepare` does all that comes before training, the base's translation included: the
    stores it builds hold the replayed corpus, and `mt train` then translates nothing."""
    _, _, env, _, lines = replayed
    sources = tmp_path / "general.de"
    sources.write_text("".join(line + "\n" for line in lines[:30]), encoding="utf-8")
    config = finetune_config(tmp_path, replay_sources=str(sources))  # the default weight
    init = ("--init-from", str(tiny_run / "best.pt"))
    prepared = mt_cli("prepare", config, "--set", f"train.init_from={init[1]}", env=env)
    assert prepared.rc == 0, prepared.err
    corpus = the_corpus(tmp_path / "run")
    assert "translating 30 of 30 lines" in prepared.err
    assert f"{corpus}/text.de: 30 pairs read" in prepared.err
    trained = mt_cli("train", config, *init, env=env)
    assert trained.rc == 0, trained.err
    assert f"30 lines translated before, in {corpus}" in trained.err
    assert "translating 30" not in trained.err
    assert f"ready: {corpus}/text.de: 30 pairs read" in trained.err  # the store prepare built
    # replayed at 0.1, the measured weight beside keep: auto's term on the replayed pairs
    record = json.loads((tmp_path / "run" / "replay.json").read_text(encoding="utf-8"))
    assert record["replay"]["weight"] == 0.1
    corpora = load(tmp_path / "run" / "last.pt")["config"]["data"]["corpora"]
    assert [(c["weight"], c["general"]) for c in corpora] == [(1.0, False), (0.1, True)]


def test_a_plain_fine_tune_adds_no_term(tiny_run, multi30k_dir, tmp_path, mt_cli):
    """keep: auto without self-replay: no frozen base, no KL in the metrics."""
    config = finetune_config(tmp_path)
    env = {"MT_DATA": str(multi30k_dir)}
    result = mt_cli("train", config, "--init-from", tiny_run / "best.pt", env=env)
    assert result.rc == 0, result.err
    assert "finetune.keep" not in result.err
    records = (tmp_path / "run" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    assert records and not any("keep_kl" in r for r in records)


def test_bad_settings_are_one_line_before_any_translation(tiny_run, multi30k_dir, tmp_path, mt_cli):
    config = finetune_config(tmp_path, replay_sources=str(tmp_path / "nowhere.de"))
    env = {"MT_DATA": str(multi30k_dir)}

    def error(*args: str) -> str:
        result = mt_cli("train", config, *args, env=env)
        assert result.rc == 2, result.err
        (line,) = result.err.strip().splitlines()
        return line

    base = ["--init-from", str(tiny_run / "best.pt")]
    assert error(*base) == (
        f"mt: error: {config}: finetune.replay_sources: {tmp_path / 'nowhere.de'}: no such file"
    )
    assert "finetune.replay_sources is translated by the base of train.init_from" in error()
    assert "finetune.replay_weight must be in (0, 1000], got 0" in error(
        *base, "--set", "finetune.replay_weight=0"
    )
    assert "finetune.replay_beam must be >= 1, got 0" in error(
        *base, "--set", "finetune.replay_beam=0"
    )
    assert not (tmp_path / "run" / "replay").exists()  # nothing translated before those
    empty = tmp_path / "empty.de"
    empty.write_text("", encoding="utf-8")
    assert error(*base, "--set", f"finetune.replay_sources={empty}") == (
        f"mt: error: {empty}: finetune.replay_sources is empty"
    )
