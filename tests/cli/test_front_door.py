"""The one door into a trained model (mt.translation.session), through the CLI: an ensemble does
what one model does or refuses in one line, tokenizers compare by vocabulary, a run directory stands
for its best.pt, and `mt average` refuses checkpoints of different runs."""

from __future__ import annotations

import json

import pytest
import torch

from mt.errors import MtError
from mt.translation.session import DecodeOptions, Session

CONSTRAINED = [
    {"src": "Ein Hund rennt im Park.", "constraints": ["dog"]},
    {"src": "Zwei Männer spielen Fußball.", "constraints": ["men", "ball"]},
    {"src": "Eine Frau sitzt auf einer Bank."},
]


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def test_an_ensemble_takes_constraints_like_one_model(tiny_run, mt_cli):
    """A model twice is that model: the same constrained output, not a traceback."""
    ckpt = tiny_run / "best.pt"
    args = ["--input-format", "jsonl", "--output-format", "jsonl", "--device", "cpu"]
    one = mt_cli("translate", ckpt, *args, stdin=_jsonl(CONSTRAINED))
    two = mt_cli("translate", ckpt, ckpt, *args, stdin=_jsonl(CONSTRAINED))
    assert one.rc == 0, one.err
    assert two.rc == 0, two.err
    outs = [json.loads(line) for line in two.out.splitlines()]
    assert [o["translation"] for o in outs] == [
        json.loads(line)["translation"] for line in one.out.splitlines()
    ]
    for row, out in zip(CONSTRAINED, outs):
        for phrase in row.get("constraints", []):
            assert phrase in out["translation"]


def test_an_ensemble_scores_as_it_decodes(tiny_run, mt_cli, tmp_path):
    """`mt score A A` gives A's scores: the ensemble's forced decoding is its members' mean."""
    src, tgt = tmp_path / "s.de", tmp_path / "t.en"
    src.write_text("Ein Hund rennt.\nZwei Männer.\n", encoding="utf-8")
    tgt.write_text("A dog runs.\nTwo men.\n", encoding="utf-8")
    ckpt = tiny_run / "best.pt"
    one = mt_cli("score", ckpt, "--src", src, "--tgt", tgt, "--device", "cpu")
    two = mt_cli("score", ckpt, ckpt, "--src", src, "--tgt", tgt, "--device", "cpu")
    assert one.rc == 0 and two.rc == 0, one.err + two.err
    a = [float(x) for line in one.out.splitlines() for x in line.split("\t")]
    b = [float(x) for line in two.out.splitlines() for x in line.split("\t")]
    assert len(a) == 4
    assert b == pytest.approx(a, abs=1e-4)


def test_attention_of_an_ensemble_is_one_line(tiny_run):
    ckpt = tiny_run / "best.pt"
    session = Session([ckpt, ckpt], "cpu")
    with pytest.raises(MtError, match="one model"):
        session.attention("Ein Hund.", DecodeOptions())


def test_same_vocabulary_from_two_trainings_makes_an_ensemble(
    tiny_run, mt_cli, multi30k_dir, tmp_path
):
    """Two runs of one config train tokenizers whose protos differ only in the temporary corpus
    path they record; they define one vocabulary, so the ensemble is accepted."""
    from support import REPO

    other_run = tmp_path / "again"
    prepared = mt_cli(
        "prepare",
        REPO / "configs" / "tiny.yaml",
        "--run-dir",
        other_run,
        "--set",
        "data.max_valid_examples=40",
        env={"MT_DATA": str(multi30k_dir.resolve())},
    )
    assert prepared.rc == 0, prepared.err
    proto = (other_run / "spm.model").read_bytes()
    data = torch.load(tiny_run / "best.pt", weights_only=True)
    assert proto != data["tokenizer"]["src"], "the protos should differ in their bytes"
    data["tokenizer"]["src"] = proto
    twin = tmp_path / "twin.pt"
    torch.save(data, twin)

    result = mt_cli("translate", tiny_run / "best.pt", twin, "--device", "cpu", stdin="Hund\n")
    assert result.rc == 0, result.err
    assert len(result.out.splitlines()) == 1


def test_a_run_directory_means_its_best_checkpoint(tiny_run, mt_cli):
    by_dir = mt_cli("translate", tiny_run, "--device", "cpu", stdin="Ein Hund rennt.\n")
    by_file = mt_cli(
        "translate", tiny_run / "best.pt", "--device", "cpu", stdin="Ein Hund rennt.\n"
    )
    assert by_dir.rc == 0, by_dir.err
    assert by_dir.out == by_file.out
    assert str(tiny_run / "best.pt") in by_dir.err


def test_a_folder_without_best_is_one_line(mt_cli, tmp_path):
    result = mt_cli("translate", tmp_path, stdin="x\n")
    assert result.rc == 2
    assert result.err.count("\n") == 1 and "best.pt" in result.err and "Traceback" not in result.err


def _with_run_id(src, dst, run_id):
    data = torch.load(src, weights_only=True)
    if run_id is None:
        data.pop("run_id", None)
    else:
        data["run_id"] = run_id
    torch.save(data, dst)
    return dst


def test_average_refuses_checkpoints_of_different_runs(tiny_run, mt_cli, tmp_path):
    a = _with_run_id(tiny_run / "best.pt", tmp_path / "a.pt", "a" * 32)
    b = _with_run_id(tiny_run / "last.pt", tmp_path / "b.pt", "b" * 32)
    out = tmp_path / "avg.pt"

    refused = mt_cli("average", a, b, "-o", out)
    assert refused.rc == 2 and not out.exists()
    lines = refused.err.strip().splitlines()
    assert len(lines) == 1 and "another run" in lines[0] and "--force" in lines[0]

    forced = mt_cli("average", a, b, "-o", out, "--force")
    assert forced.rc == 0, forced.err
    assert out.is_file()

    same = _with_run_id(tiny_run / "last.pt", tmp_path / "c.pt", "a" * 32)
    assert mt_cli("average", a, same, "-o", tmp_path / "ok.pt").rc == 0


def test_average_of_checkpoints_without_a_run_id_needs_force(tiny_run, mt_cli, tmp_path):
    a = _with_run_id(tiny_run / "best.pt", tmp_path / "a.pt", None)
    b = _with_run_id(tiny_run / "last.pt", tmp_path / "b.pt", "b" * 32)
    refused = mt_cli("average", a, b, "-o", tmp_path / "x.pt")
    assert refused.rc == 2 and "run id" in refused.err and "--force" in refused.err


def test_overrides_are_checked_once_by_the_config_rules(tiny_run):
    """The server names options its own way; the rule and its numbers are the config's."""
    session = Session([tiny_run / "best.pt"], "cpu", name=lambda k: "options." + k.split(".")[1])
    with pytest.raises(
        MtError, match=r"options\.nbest must be between 1 and .*options\.beam \(2\)"
    ):
        session.decode_config(DecodeOptions(beam=2, nbest=3))
    for knob, value in (("topk", 3), ("topp", 0.9), ("temperature", 0.7), ("seed", 2)):
        with pytest.raises(MtError, match=rf"options\.{knob} needs options\.sample"):
            session.decode_config(DecodeOptions(**{knob: value}))
        assert session.decode_config(DecodeOptions(sample=True, **{knob: value})).sample
    dcfg = session.decode_config(DecodeOptions(beam=3))
    assert dcfg.beam == 3 and session.cfg.decode.beam != 3  # the checkpoint's config untouched
