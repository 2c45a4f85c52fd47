"""`mt distill`: the tiny trained model of the fixtures teaches a smaller student on a Multi30k
slice. The distilled corpus is what `mt translate` writes with the same teacher and settings,
kept by what made it (a rerun translates nothing, another beam or teacher translates again),
resumed after a real kill, and the student's checkpoints name their teacher."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from support import REPO

from mt.checkpoint import load
from mt.config import CorpusConfig
from mt.config_file import load_config
from mt.data.corpus import train_sources
from mt.distill import Distilled, Teachers, distil, student_data, teacher_fingerprint
from mt.errors import MtError

LINES = 120  # training pairs of the slice: not a multiple of the chunk, the last one is short


def student_config(folder: Path, teacher: Path, lines: int = LINES, **distill: object) -> Path:
    """A student smaller than configs/tiny.yaml (3 encoder layers, 1 decoder layer) that
    trains 4 steps on the teacher's translations of the first `lines` training pairs."""
    cfg = {
        "data": {"max_train_examples": lines, "max_valid_examples": 20},
        "tokenizer": {"vocab_size": 300},
        "model": {"d_model": 32, "n_heads": 2, "d_ff": 64, "encoder_layers": 3,
                  "decoder_layers": 1},
        "train": {"run_dir": str(folder / "student"), "max_steps": 4, "eval_every": 4,
                  "log_every": 2, "threads": 1, "warmup": 2, "eval_bleu": False},
        "distill": {"teachers": [str(teacher)], "beam": 2, "buffer_lines": 20,
                    "chunk_lines": 40, **distill},
    }  # fmt: skip
    path = folder / "student.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def first_lines(path: Path, n: int) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


@pytest.fixture(scope="module")
def distilled(tiny_run, multi30k_dir, tmp_path_factory):
    """One `mt distill` of the tiny teacher into a student, and its stderr."""
    folder = tmp_path_factory.mktemp("distill")
    config = student_config(folder, tiny_run / "best.pt")
    env = {"MT_DATA": str(multi30k_dir)}
    from support.inprocess import run_mt_here

    result = run_mt_here("distill", config, env=env)
    assert result.rc == 0, result.err
    return folder, config, env, result.err


def the_corpus(run: Path) -> Path:
    (folder,) = [p for p in (run / "distill").iterdir() if p.is_dir()]
    return folder


def test_distilled_corpus_is_what_mt_translate_writes(distilled, tiny_run, multi30k_dir, mt_cli):
    folder, _, env, err = distilled
    corpus = the_corpus(folder / "student")
    src = (corpus / "text.de").read_text(encoding="utf-8").splitlines()
    tgt = (corpus / "text.en").read_text(encoding="utf-8").splitlines()
    assert src == first_lines(multi30k_dir / "train.de.gz", LINES)
    assert len(tgt) == LINES and sum(bool(t) for t in tgt) > LINES * 0.9
    assert f"translating {LINES} of {LINES} lines" in err and "3 chunks written" in err
    out = folder / "translate.en"
    args = ["translate", tiny_run / "best.pt", "--input", corpus / "text.de", "--output", out]
    result = mt_cli(*args, "--beam", "2", "--buffer-lines", "20", "--device", "cpu", env=env)
    assert result.rc == 0, result.err
    assert out.read_bytes() == (corpus / "text.en").read_bytes()


def test_the_student_trains_on_the_translations_and_names_its_teacher(distilled, tiny_run):
    folder, _, _, _ = distilled
    run = folder / "student"
    corpus = the_corpus(run)
    best = load(run / "best.pt")
    teacher = load(tiny_run / "best.pt")
    record = best["origin"]["distill"]
    assert record["teachers"] == [
        {"path": str(tiny_run / "best.pt"), "fingerprint": teacher_fingerprint(teacher)}
    ]
    assert record["settings"]["decode"]["beam"] == 2
    assert record["corpora"][0]["lines"] == LINES
    assert best["config"]["model"]["decoder_layers"] == 1  # the student's shape, not the teacher's
    assert best["config"]["data"]["corpora"] == [
        {
            "name": "text", "root": str(corpus), "format": "text", "hf_subset": "", "weight": 1.0,
            "general": False,  # a student's corpus: no base to keep close to
        }
    ]  # fmt: skip
    saved = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    assert saved["distill"]["teachers"] == [str(tiny_run / "best.pt")]
    assert saved["data"]["corpora"][0]["root"] == str(corpus)
    assert best["step"] == 4


def test_keep_original_mixes_the_original_corpora_in_at_their_share(tmp_path):
    """`distill.keep_original: W`: each original corpus beside its translation, at W times its
    weight; 0 (the default): the translations alone, each with its corpus's weight."""
    cfg = load_config(student_config(tmp_path, tmp_path / "teacher.pt"))
    cfg.data.corpora = [CorpusConfig("a", "/data", weight=2.0), CorpusConfig("b", "/web", "tsv")]
    sources = train_sources(cfg.data)
    distilled = [
        Distilled(s, tmp_path / key, key, 10, cached=True) for s, key in zip(sources, "xy")
    ]
    alone = student_data(cfg.data, distilled, 0.0)
    assert [(c.name, c.root, c.format, c.weight) for c in alone.corpora] == [
        ("text", str(tmp_path / "x"), "text", 2.0),
        ("text", str(tmp_path / "y"), "text", 1.0),
    ]
    mixed = student_data(cfg.data, distilled, 0.5)
    assert [(c.name, c.root, c.format, c.weight) for c in mixed.corpora[2:]] == [
        ("a", "/data", "text", 1.0),
        ("b", "/web", "tsv", 0.5),
    ]
    assert cfg.data.corpora[0].weight == 2.0  # the config's own section is left as it was


def test_a_rerun_translates_nothing(distilled, mt_cli):
    folder, config, env, _ = distilled
    corpus = the_corpus(folder / "student")
    before = (corpus / "text.en").stat().st_mtime_ns
    result = mt_cli("distill", config, "--resume", env=env)
    assert result.rc == 0, result.err
    assert f"{LINES} lines translated before, in {corpus}" in result.err
    assert "translating" not in result.err and "chunks written" not in result.err
    assert (corpus / "text.en").stat().st_mtime_ns == before


def test_another_beam_or_teacher_translates_again(distilled, tiny_run, multi30k_dir, tmp_path):
    """The key holds the teachers' weights and the search: each change is a new folder."""
    folder, config, _, _ = distilled
    best = teacher_fingerprint(load(tiny_run / "best.pt"))
    other = next(  # a checkpoint of the same run with other weights than best.pt's
        p
        for p in [tiny_run / "last.pt", *sorted(tiny_run.glob("checkpoint_*.pt"))]
        if teacher_fingerprint(load(p)) != best
    )
    keys = {}
    for name, sets in {
        "same": [],
        "beam": ["distill.beam=1"],
        "alpha": ["distill.alpha=1.3"],
        "teacher": [f"distill.teachers=[{other}]"],
    }.items():
        cfg = load_config(config, [*sets, f"data.root={multi30k_dir}"])
        teachers = Teachers(cfg, [Path(cfg.distill.teachers[0])], "cpu", str(config))
        (source,) = train_sources(cfg.data)
        if name == "same":  # the fixture's run directory: found there
            done = distil(teachers, source, LINES, folder / "student" / "distill")
        else:  # a dozen lines into a folder of their own
            done = distil(teachers, source, 12, tmp_path)
        keys[name] = (done.key, done.cached, done.lines)
    assert keys["same"] == (the_corpus(folder / "student").name, True, LINES)
    assert len({key for key, _, _ in keys.values()}) == 4
    assert [cached for _, cached, _ in keys.values()] == [True, False, False, False]


def test_a_killed_translation_resumes_into_the_same_corpus(
    distilled, tiny_run, multi30k_dir, tmp_path, mt_cli
):
    """A real `kill -9` of `mt distill` while it translates; the rerun translates only the
    missing chunks and ends with the corpus of the uninterrupted run."""
    lines = 600  # 30 chunks: a fast machine is still translating when the kill comes
    config = student_config(tmp_path, tiny_run / "best.pt", lines, chunk_lines=20)
    env = {**os.environ, "MT_DATA": str(multi30k_dir), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mt", "distill", str(config)],
        env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    root = tmp_path / "student" / "distill"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if len(list(root.glob("*/text.en.parts/000000*"))) >= 2:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    corpus = the_corpus(tmp_path / "student")
    written = len(list(corpus.glob("text.en.parts/0*")))
    assert 2 <= written < lines // 20 and not (corpus / "text.en").exists()
    result = mt_cli("distill", config, env={"MT_DATA": str(multi30k_dir)})
    assert result.rc == 0, result.err
    assert f"translating {lines - written * 20} of {lines} lines" in result.err
    assert f"{lines // 20 - written} chunks written, {written} found done" in result.err
    out = tmp_path / "one.en"
    args = ["translate", tiny_run / "best.pt", "--input", corpus / "text.de", "--output", out]
    result = mt_cli(*args, "--beam", "2", "--buffer-lines", "20", "--device", "cpu")
    assert result.rc == 0, result.err
    assert out.read_bytes() == (corpus / "text.en").read_bytes()
    assert torch.load(tmp_path / "student" / "best.pt", weights_only=True)["origin"]


def test_array_shares_translate_then_one_run_trains(
    distilled, tiny_run, multi30k_dir, tmp_path, mt_cli
):
    """`--shard K/N` (array jobs): each share translates its chunks and stops, the last one
    merges; `mt distill` without --shard then finds the corpus whole and trains."""
    folder, _, env, _ = distilled
    config = student_config(tmp_path, tiny_run / "best.pt")
    first = mt_cli("distill", config, "--shard", "1/2", env=env)
    assert first.rc == 0, first.err
    assert "translating 40 of 120 lines (share 1/2)" in first.err
    assert "share 1/2 translated" in first.err and not (tmp_path / "student" / "last.pt").exists()
    second = mt_cli("distill", config, "--shard", "0/2", env=env)
    assert second.rc == 0, second.err
    assert "2 chunks written, 0 found done; merged 3 chunks" in second.err
    corpus = the_corpus(tmp_path / "student")
    assert (corpus / "text.en").read_bytes() == (
        the_corpus(folder / "student") / "text.en"
    ).read_bytes()  # the one-process corpus of the fixture
    done = mt_cli("distill", config, env=env)
    assert done.rc == 0, done.err
    assert "120 lines translated before" in done.err
    assert load(tmp_path / "student" / "best.pt")["step"] == 4


def test_an_ensemble_of_teachers_translates_as_mt_translate_does(
    tiny_run, multi30k_dir, tmp_path, mt_cli
):
    members = [tiny_run / "best.pt", tiny_run / "last.pt"]
    config = student_config(tmp_path, members[0], lines=24)
    cfg = load_config(config, [f"data.root={multi30k_dir}", f"distill.teachers={members}"])
    teachers = Teachers(cfg, members, "cpu", str(config))
    assert teachers.describe().startswith(f"an ensemble of {members[0]}, {members[1]}, beam 2")
    (source,) = train_sources(cfg.data)
    done = distil(teachers, source, 24, tmp_path / "distill")
    assert done is not None and done.lines == 24
    out = tmp_path / "translate.en"
    args = ["translate", *members, "--input", done.folder / "text.de", "-o", out]
    result = mt_cli(*args, "--beam", "2", "--buffer-lines", "20", "--device", "cpu")
    assert result.rc == 0, result.err
    assert out.read_bytes() == (done.folder / "text.en").read_bytes()
    record = json.loads((done.folder / "distill.json").read_text(encoding="utf-8"))
    assert [t["path"] for t in record["teachers"]] == [str(m) for m in members]


def test_interpolation_writes_the_hypothesis_nearest_the_reference(
    tiny_run, multi30k_dir, tmp_path, mt_cli
):
    """`distill.interpolate: 3`: each target is one of `mt translate --nbest 3`'s hypotheses,
    the one of highest sentence BLEU against the line's reference; the references are kept
    beside the sources and make another key than the teachers' best alone."""
    from sacrebleu.metrics import BLEU

    config = student_config(tmp_path, tiny_run / "best.pt", lines=30, beam=3)
    keys = {}
    for n in (0, 3):
        cfg = load_config(config, [f"data.root={multi30k_dir}", f"distill.interpolate={n}"])
        teachers = Teachers(cfg, [tiny_run / "best.pt"], "cpu", str(config))
        (source,) = train_sources(cfg.data)
        done = distil(teachers, source, 30, tmp_path / "distill")
        assert done is not None and done.lines == 30
        keys[n] = done
    assert keys[0].key != keys[3].key and "nearest the reference of 3" in teachers.describe()
    folder = keys[3].folder
    refs = (folder / "reference.en").read_text(encoding="utf-8").splitlines()
    assert refs == first_lines(multi30k_dir / "train.en.gz", 30)
    chosen = (folder / "text.en").read_text(encoding="utf-8").splitlines()
    best = (keys[0].folder / "text.en").read_text(encoding="utf-8").splitlines()
    out = tmp_path / "nbest.txt"
    args = ["translate", tiny_run / "best.pt", "--input", folder / "text.de", "-o", out]
    result = mt_cli(*args, "--beam", "3", "--nbest", "3", "--buffer-lines", "20", "--device", "cpu")
    assert result.rc == 0, result.err
    nbest: list[list[str]] = [[] for _ in refs]
    for line in out.read_text(encoding="utf-8").splitlines():
        index, text, _ = line.split(" ||| ")
        nbest[int(index)].append(text)
    bleu = BLEU(effective_order=True)
    for target, hyps, ref, first in zip(chosen, nbest, refs, best, strict=True):
        scores = [bleu.sentence_score(h, [ref]).score for h in hyps]
        assert target == hyps[scores.index(max(scores))]
        assert first == hyps[0]


def test_nearest_picks_the_hypothesis_of_highest_sentence_bleu_the_better_scored_on_a_tie():
    """The choice itself, on hypotheses made to differ (the tiny teacher's rarely do)."""
    from mt.distill import nearest
    from mt.translation.requests import Hypothesis, Translation

    def translation(*texts: str) -> Translation:
        hyps = [Hypothesis([], -float(k)) for k in range(len(texts))]
        return Translation(texts[0], hyps, list(texts))

    refs = ["a dog runs on the beach .\n", "two men talk .", "a cat .", ""]
    got = nearest(
        [
            translation("a dog is running along a beach .", "a dog runs on the beach ."),
            translation("two men are talking .", "two men chat .", "two men talk ."),
            translation("a cat .", "the cat ."),  # the first: already the nearest
            translation("", ""),  # an empty line: nothing nearer
        ],
        refs,
    )
    assert [t.text for t in got] == ["a dog runs on the beach .", "two men talk .", "a cat .", ""]
    same = nearest([translation("one cat .", "a dog .")], ["two birds ."])  # both 0: the first
    assert [t.text for t in same] == ["one cat ."]


def test_a_multilingual_teacher_is_asked_for_the_students_direction(
    multi_run, multi30k_dir, tmp_path, mt_cli
):
    """A teacher of several directions (the fixtures' de-en, en-de, en-fr, fr-en model)
    translates the student's en-fr as `mt translate --from en --to fr` does; a direction
    outside its languages is one line naming them."""
    config = student_config(tmp_path, multi_run / "best.pt", lines=30)
    cfg = load_config(config, [f"data.root={multi30k_dir}", "data.src_lang=en", "data.tgt_lang=fr"])
    teachers = Teachers(cfg, [multi_run / "best.pt"], "cpu", str(config))
    (source,) = train_sources(cfg.data)
    done = distil(teachers, source, 30, tmp_path / "distill")
    assert done is not None and done.lines == 30
    out = tmp_path / "translate.fr"
    args = ["translate", multi_run / "best.pt", "--input", done.folder / "text.en", "-o", out]
    result = mt_cli(*args, "--from", "en", "--to", "fr", "--beam", "2", "--buffer-lines", "20")
    assert result.rc == 0, result.err
    assert out.read_bytes() == (done.folder / "text.fr").read_bytes()
    cfg = load_config(config, [f"data.root={multi30k_dir}", "data.src_lang=en", "data.tgt_lang=cs"])
    with pytest.raises(MtError, match=f"^{multi_run / 'best.pt'}: cannot be the teacher of "):
        Teachers(cfg, [multi_run / "best.pt"], "cpu", str(config))


def test_bad_input_is_one_line(tiny_run, multi30k_dir, tmp_path, mt_cli):
    config = student_config(tmp_path, tiny_run / "best.pt")
    env = {"MT_DATA": str(multi30k_dir)}

    def error(*sets: str) -> str:
        args = [a for s in sets for a in ("--set", s)]
        result = mt_cli("distill", config, *args, env=env)
        assert result.rc == 2, result.err
        (line,) = result.err.strip().splitlines()
        return line

    missing = tmp_path / "nowhere.pt"
    assert error(f"distill.teachers=[{missing}]") == (
        f"mt: error: {config}: distill.teachers[0]: {missing}: no such checkpoint"
    )
    assert error("distill.teachers=[]").startswith(
        f"mt: error: {config}: distill.teachers is empty"
    )
    assert "the teacher translates de-en, but" in error("data.src_lang=en", "data.tgt_lang=de")
    assert "did you mean distill.beam?" in error("distill.beem=3")
    assert "distill.chunk_lines (30) must be a multiple of distill.buffer_lines (20)" in error(
        "distill.chunk_lines=30"
    )
    assert not (tmp_path / "student" / "distill").exists()  # nothing translated before the error
