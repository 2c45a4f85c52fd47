"""`mt prepare` through the real command line: broken corpora give one error line naming the file
and line and leave no half-written store; an old store is rebuilt; a prepared run trains at once.

Most cases put a tokenizer in the run directory first, so that the error comes while the store
is being written (chunks already appended), not while the tokenizer's sample is drawn.
"""

from __future__ import annotations

import gzip
import json
import shutil
import zlib
from pathlib import Path

import pytest
import yaml

from mt.config import TokenizerConfig
from mt.tokenizer import Tokenizer, train_tokenizer

REPO = Path(__file__).resolve().parents[2]
WORDS = ["ein", "Hund", "rennt", "zwei", "Katzen", "spielen", "im", "Park", "a", "dog", "runs"]
BIG = 50_000  # lines: more than two of the reader's 20,000-pair chunks


def sentence(i: int) -> str:
    return f"{WORDS[i % 11]} {WORDS[(i * 7) % 11]} {WORDS[(i * 3) % 11]} {i % 1000}"


def lines(n: int) -> list[str]:
    return [sentence(i) for i in range(n)]


def write(path: Path, rows: list[str] | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = rows if isinstance(rows, bytes) else "".join(r + "\n" for r in rows).encode()
    path.write_bytes(data)


def write_config(folder: Path, **data: object) -> Path:
    config = {
        "data": {"root": str(folder / "data"), "src_lang": "de", "tgt_lang": "en", **data},
        "tokenizer": {"vocab_size": 40},
        "train": {"run_dir": str(folder / "run")},
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return train_tokenizer(lines(2000), lines(2000), TokenizerConfig(vocab_size=40))


def assert_clean_failure(result, cache: Path, *words: object) -> str:
    """Exit 2, exactly one `mt: error:` line naming `words`, and nothing in the cache."""
    assert result.rc == 2, result.err
    assert "Traceback" not in result.err, result.err
    err = result.err.splitlines()
    assert len(err) == 1 and err[0].startswith("mt: error: "), result.err
    for word in words:
        assert str(word) in err[0], err[0]
    left = sorted(p.name for p in cache.iterdir()) if cache.exists() else []
    assert left == [], left  # neither a `.tmp-` folder nor a store
    return err[0]


@pytest.mark.parametrize("with_tokenizer", [True, False])
def test_truncated_gz(tmp_path, multi30k_dir, mt_cli, tokenizer, with_tokenizer):
    data = tmp_path / "data"
    data.mkdir()
    for lang in ("de", "en"):  # Multi30k twice over: the cut lands in the reader's second chunk
        text = gzip.decompress((multi30k_dir / f"train.{lang}.gz").read_bytes())
        (data / f"train.{lang}.gz").write_bytes(gzip.compress(text + text))
        shutil.copy(multi30k_dir / f"val.{lang}.gz", data / f"val.{lang}.gz")
    bad = data / "train.de.gz"
    whole = bad.read_bytes()
    bad.write_bytes(whole[: len(whole) // 2])
    good = zlib.decompressobj(wbits=31).decompress(whole[: len(whole) // 2]).count(b"\n")
    if with_tokenizer:
        tokenizer.save(tmp_path / "run")
    result = mt_cli("prepare", write_config(tmp_path))
    line = assert_clean_failure(result, tmp_path / "run" / "cache", bad, "truncated or damaged")
    after = int(line.split(": after line ")[1].split(":")[0])
    assert 20_000 <= after <= good < 58_000  # a line before the damage


@pytest.mark.parametrize("with_tokenizer", [True, False])
def test_nul_byte_in_a_line(tmp_path, mt_cli, tokenizer, with_tokenizer):
    de = lines(BIG)
    de[41_234] = de[41_234] + "\0tail"
    write(tmp_path / "data" / "train.de", de)
    write(tmp_path / "data" / "train.en", lines(BIG))
    if with_tokenizer:
        tokenizer.save(tmp_path / "run")
    result = mt_cli("prepare", write_config(tmp_path))
    assert_clean_failure(
        result, tmp_path / "run" / "cache", f"{tmp_path / 'data' / 'train.de'}:41235: NUL byte"
    )


@pytest.mark.parametrize("longer", ["de", "en"])
def test_lengths_differ_only_at_the_end(tmp_path, mt_cli, tokenizer, longer):
    for lang in ("de", "en"):
        write(tmp_path / "data" / f"train.{lang}", lines(BIG + (lang == longer)))
    tokenizer.save(tmp_path / "run")
    result = mt_cli("prepare", write_config(tmp_path))
    de, en = tmp_path / "data" / "train.de", tmp_path / "data" / "train.en"
    n_de, n_en = BIG + (longer == "de"), BIG + (longer == "en")
    assert_clean_failure(
        result, tmp_path / "run" / "cache", f"{de} has {n_de} lines", f"{en} has {n_en}"
    )


def test_jsonl_record_missing_a_language(tmp_path, mt_cli, tokenizer):
    rows = [json.dumps({"de": s, "en": s}) for s in lines(BIG)]
    rows[30_001] = json.dumps({"de": "nur deutsch"})
    write(tmp_path / "data" / "train.jsonl", rows)
    tokenizer.save(tmp_path / "run")
    result = mt_cli("prepare", write_config(tmp_path, format="jsonl", train="train.jsonl"))
    path = tmp_path / "data" / "train.jsonl"
    assert_clean_failure(result, tmp_path / "run" / "cache", f"{path}:30002: missing language 'en'")


@pytest.mark.parametrize("with_tokenizer", [True, False])
def test_datasets_folder_without_the_split(tmp_path, mt_cli, tokenizer, with_tokenizer):
    datasets = pytest.importorskip("datasets")
    rows = [{"de": s, "en": s} for s in lines(50)]
    dd = datasets.DatasetDict({"validation": datasets.Dataset.from_list(rows)})
    dd.save_to_disk(str(tmp_path / "hf"))
    if with_tokenizer:
        tokenizer.save(tmp_path / "run")
    config = write_config(tmp_path, root=str(tmp_path / "hf"), format="hf", valid="validation")
    result = mt_cli("prepare", config)
    assert_clean_failure(
        result, tmp_path / "run" / "cache", tmp_path / "hf", "no split named 'train'"
    )


def store_folders(cache: Path) -> dict[str, Path]:
    return {p.name.rsplit("-", 1)[0]: p for p in cache.iterdir()}


def test_older_format_store_is_rebuilt(tmp_path, mt_cli):
    write(tmp_path / "data" / "train.de", lines(300))
    write(tmp_path / "data" / "train.en", lines(300)[::-1])
    write(tmp_path / "data" / "val.de", lines(20))
    write(tmp_path / "data" / "val.en", lines(20))
    config = write_config(tmp_path)
    first = mt_cli("prepare", config)
    assert first.rc == 0, first.err
    cache = tmp_path / "run" / "cache"
    folders = store_folders(cache)
    assert sorted(folders) == ["train", "val"]
    meta_path = folders["train"] / "meta.json"
    fresh = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**fresh, "format": 0}))

    again = mt_cli("prepare", config)
    assert again.rc == 0, again.err
    assert "Traceback" not in again.err
    assert f"{folders['train']}: rebuilding the token store (format 0" in again.err
    assert json.loads(meta_path.read_text())["format"] == fresh["format"] >= 1
    assert json.loads(meta_path.read_text())["pairs"] == fresh["pairs"] == 300
    assert "ready: " in again.err  # the dev store was fine and is only opened
    assert store_folders(cache) == folders and not [p for p in cache.iterdir() if ".tmp-" in p.name]


def test_prepare_then_train_does_not_encode_again(tmp_path, multi30k_dir, mt_cli):
    run = tmp_path / "run"
    sets = ["--set", "data.max_train_examples=1500", "--set", "data.max_valid_examples=40"]
    env = {"MT_DATA": str(multi30k_dir.resolve())}
    prepared = mt_cli("prepare", REPO / "configs" / "tiny.yaml", "--run-dir", run, *sets, env=env)
    assert prepared.rc == 0, prepared.err
    assert "Traceback" not in prepared.err
    summary = [line for line in prepared.err.splitlines() if "pairs read" in line]
    assert len(summary) == 2, prepared.err  # the training and the dev store
    assert "1,500 pairs read, " in summary[0] and " kept" in summary[0]
    assert "40 pairs read, 40 kept" in summary[1]
    assert (run / "spm.model").is_file()
    cache = run / "cache"
    stamps = {p: (p.stat().st_mtime_ns, p.stat().st_ino) for p in cache.rglob("*")}
    assert len(stamps) == 2 + 2 * 6  # two stores of six files each

    trained = mt_cli(
        "train",
        REPO / "configs" / "tiny.yaml",
        "--run-dir",
        run,
        *sets,
        *(
            "--set",
            "train.max_steps=2",
            "--set",
            "train.eval_every=2",
            "--set",
            "train.log_every=1",
        ),
        *("--set", "train.eval_bleu=false", "--set", "train.keep_last=0"),
        *("--set", "train.threads=1"),
        env=env,
    )
    assert trained.rc == 0, trained.err
    assert trained.err.count("ready: ") == 2, trained.err
    assert "pairs read" in trained.err and "tokenizer:" not in trained.err
    assert "rebuilding" not in trained.err
    assert {p: (p.stat().st_mtime_ns, p.stat().st_ino) for p in cache.rglob("*")} == stamps
    assert (run / "last.pt").is_file()
