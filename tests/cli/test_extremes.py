"""Every numeric option at its extremes: 0, negative and absurdly large.

One table lists each numeric config value and each numeric flag of every command with what the
three values must do: `E` (exit non-zero with one `mt: error:` line naming the option), `W`
(work: exit 0 and produce what the command produces) or `A` (either of the two; e.g. a huge
learning rate may train or be stopped by the divergence guard, a `--max-doubt` gate may or may
not trip). Never a traceback.

The table is checked against the config dataclasses and the commands' parameters, so a new
numeric option without a row fails `test_the_table_covers_every_numeric_option`.

Commands run in this process through `mt.cli.main` (the entry point of the `mt` script) on a
five-sentence corpus, so the ~200 cases take seconds each at most; a traceback reaches pytest
as an exception and fails the case.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from pathlib import Path

import pytest
import typer
import yaml
from support.inprocess import run_in_process
from support.tasks import write_five_sentence_task

from mt.cli import app, main
from mt.config import Config

HUGE_INT = 10**30
HUGE_FLOAT = 1e30
VALUES = {"zero": 0, "negative": -1, "huge": None}  # None: HUGE_INT or HUGE_FLOAT by type


# key -> outcomes at (0, -1, huge), optionally with extra `--set`s that keep a working run short.
CONFIG_TABLE: dict[str, tuple[str, ...] | tuple[str, list[str]]] = {
    "data.max_len": ("EEE",),  # lengths are 16-bit in the token store
    "data.max_len_ratio": ("EEW",),
    "data.max_train_examples": ("WEW",),
    "data.max_valid_examples": ("WEW",),
    "data.corpora.weight": ("EEE",),
    "data.sampling_temperature": ("EEE",),  # (0, 100]: a typo otherwise
    "data.terms.share": ("WEE",),  # 0: off; a share is at most 1
    "data.terms.mask": ("WEE",),  # 0: none masked; a share is at most 1
    "data.terms.max_terms": ("EEE",),  # 1 to 16 terms a line
    "data.terms.min_dice": ("EEE",),  # (0, 1]
    "data.terms.min_count": ("EEE",),
    "data.terms.skip_common": ("WEE",),  # 0: every stem may be a term
    "data.terms.lexicon_lines": ("EEE",),  # 100 to 100 million pairs sampled
    "tokenizer.vocab_size": ("EEE",),  # token ids are 16-bit in the token store
    "tokenizer.character_coverage": ("EEE",),
    "tokenizer.input_sentence_size": ("EEE",),
    "tokenizer.sample_alpha": ("WEE",),  # 0: off; at most 1
    "tokenizer.sample_copies": ("EEE",),  # 1 to 64 stores of the corpus
    "model.d_model": ("EEE",),  # huge: the memory check before building the model
    "model.n_heads": ("EEE",),
    "model.d_ff": ("EEE",),
    "model.encoder_layers": ("EEE",),
    "model.decoder_layers": ("EEE",),
    "model.dropout": ("WEE",),
    "model.attention_dropout": ("WEE",),
    "model.activation_dropout": ("WEE",),
    "model.max_positions": ("EEE",),
    "train.seed": ("WEE",),
    "train.checkpoint_minutes": ("WEW",),  # 0: by steps only; huge: never by time
    "train.collective_timeout_s": ("EEE",),  # at most a month
    "train.threads": ("WEE",),
    "train.loader_workers": ("WEE",),
    "train.max_tokens": ("EEE",),
    "train.accum_steps": ("EEE",),
    "train.optimizer_betas": ("WEE",),  # both betas set to the value
    "train.optimizer_eps": ("EEW",),
    "train.weight_decay": ("WEE",),
    "train.lr_scale": ("EEA", ["train.schedule=noam"]),
    "train.lr": ("EEA",),
    "train.warmup": ("EEW",),
    "train.label_smoothing": ("WEE",),
    "train.clip_norm": ("WEW",),
    "train.max_bad_updates": ("EEW",),
    "train.max_steps": ("EEW", ["train.max_epochs=1"]),
    "train.max_epochs": ("WEW",),
    "train.max_minutes": ("WEW",),
    "train.patience": ("WEW",),
    "train.log_every": ("EEW",),
    "train.eval_every": ("EEW",),
    "train.keep_last": ("WEW",),
    "train.average_last": ("WEE",),
    "train.ema_decay": ("WEE",),  # 0: off; an average's decay is below 1
    "train.rdrop": ("WEE",),  # 0: off; alpha at most 100
    "train.cooldown": ("WEE",),  # 0: off; a share of the budget, below 1
    # one point of the rule, the others' lists set to match (test_config_value_at_extreme)
    "train.dropout_by_epochs.epochs": ("WEW",),  # epochs >= 0, any number of them
    "train.dropout_by_epochs.dropout": ("WEE",),  # rates in [0, 1)
    "train.dropout_by_epochs.attention_dropout": ("WEE",),
    "train.dropout_by_epochs.activation_dropout": ("WEE",),
    "train.tune_beam": ("EEE",),  # one beam of the value; the beam's own bounds
    "train.tune_alpha": ("WEE",),  # one length penalty of the value, in [0, 10]
    "train.tune_within": ("WEE",),  # BLEU points, in [0, 100]
    "decode.beam": ("EEE",),
    "decode.nbest": ("EEE",),
    "decode.alpha": ("WEE",),
    "decode.no_repeat_ngram": ("WEE",),
    # huge: the output limit is the model's positions; 64 of them keep an untrained model's
    # run to that limit short.
    "decode.length_offset": ("WEE",),  # tokens an imported model's penalty counts: 0 to 16
    "model.position_offset": ("WEE",),  # an imported model's first position row
    "decode.max_len_a": ("WEW", ["model.max_positions=64"]),
    "decode.max_len_b": ("WEW", ["model.max_positions=64"]),
    "decode.max_tokens": ("EEE",),
    "decode.buffer_lines": ("EEE",),
    "decode.workers": ("EEE",),  # 1 to 1,024 processes
    "decode.topk": ("WEW",),  # 0: no limit; huge: all tokens
    "decode.topp": ("EEE",),
    "decode.temperature": ("EEW",),
    "decode.seed": ("WEE",),
    "decode.shortlist": ("WEE",),  # 0: off; a checkpoint without one is refused at use
    "decode.target_vocab_ratio": ("WEE",),  # 0: every piece seen; a ratio is at most 1
    "decode.glossary_boost": ("WEE",),  # 0: off; at most 100
    "finetune.lora_rank": ("EEE",),  # checked whether or not an adapter is trained
    "finetune.lora_alpha": ("EEW",),
    "finetune.lora_dropout": ("WEE",),
    "finetune.lora_b_lr": ("EEE",),  # (0, 1000]: a multiple of train.lr
    "finetune.keep_weight": ("EEE",),  # checked whether or not a base is kept
    "finetune.replay_weight": ("EEE",),  # (0, 1000], checked without replay_sources too
    "finetune.replay_beam": ("EEW",),  # >= 1
    "finetune.replay_max_lines": ("WEW",),  # 0: every line
    "train.watch.max_examples": ("WEW",),  # 0: every line of the watched set
    "train.watch.keep_within": ("WEE",),  # [0, 100] BLEU below the base's (unset: no bound)
    # `mt train` checks the distill section and trains on the original pairs
    "distill.beam": ("EEE",),
    "distill.alpha": ("WEE",),  # [0, 10]; unset: the first teacher's
    "distill.max_tokens": ("WEE",),  # 0: the teacher's decode.max_tokens
    "distill.buffer_lines": ("WEE",),  # 0: the teacher's decode.buffer_lines
    "distill.chunk_lines": ("WEE",),  # 0: the buffer lines
    "distill.workers": ("EEE",),  # 1 to 1,024 processes
    "distill.keep_original": ("WEE",),  # 0: the teachers' translations alone
    "distill.interpolate": ("WEE",),  # 0: the teachers' best; at most distill.beam
}

# (command, flag) -> outcomes at (0, -1, huge).
FLAG_TABLE: dict[tuple[str, str], str] = {
    ("translate", "--beam"): "EEE",
    ("translate", "--nbest"): "EEE",
    ("translate", "--alpha"): "WEE",
    ("translate", "--max-tokens"): "EEE",
    ("translate", "--no-repeat-ngram"): "WEE",
    ("translate", "--topk"): "WEW",  # 0: no limit; huge: all tokens
    ("translate", "--topp"): "EEE",
    ("translate", "--temperature"): "EEW",
    ("translate", "--seed"): "WEE",
    ("translate", "--length-offset"): "WEE",  # 0 to 16, as decode.length_offset
    ("translate", "--target-vocab-ratio"): "WEE",  # a bilingual model: checked, then unused
    ("translate", "--shortlist"): "WEE",  # 0: off; huge: past the bound (and no shortlist)
    ("eval", "--shortlist"): "WEE",
    ("translate", "--glossary-boost"): "WEE",
    ("eval", "--glossary-boost"): "WEE",
    ("shortlist", "--k"): "EEE",  # 1 to 100,000 candidates a source piece
    ("shortlist", "--frequent"): "WEE",  # 0: no frequent pieces; at most 1,000,000
    ("eval", "--beam"): "EEE",
    ("eval", "--alpha"): "WEE",
    ("eval", "--max-tokens"): "EEE",
    ("eval", "--min-bleu"): "WWE",  # huge: the gate fails, exit 1 with one line
    ("translate", "--max-len-a"): "WEW",  # huge: capped by the model's positions
    ("translate", "--max-len-b"): "WEW",
    ("eval", "--max-len-a"): "WEW",
    ("eval", "--max-len-b"): "WEW",
    # A share of lines: 0 gates on any flagged line, which a 2-step model may or may not
    # write (A: exit 0, or the gate's exit 1 naming the flag)
    ("translate", "--max-doubt"): "AEE",
    ("eval", "--max-doubt"): "AEE",
    ("attention", "--layer"): "WWE",
    ("attention", "--head"): "WWE",
    ("attention", "--beam"): "EEE",
    ("score", "--max-tokens"): "EEE",
    ("translate", "--buffer-lines"): "EEE",
    ("translate", "--workers"): "EEE",
    ("eval", "--workers"): "EEE",
    ("translate", "--chunk-lines"): "EEE",
    ("score", "--buffer-lines"): "EEE",
    ("score", "--chunk-lines"): "EEE",
    # serve: W means the value was accepted; the missing checkpoint then stops it (see below)
    ("serve", "--port"): "WEE",  # 0: the OS picks a free port
    ("serve", "--max-items"): "EEW",
    ("serve", "--max-chars"): "EEW",
    ("serve", "--max-queue"): "EEW",
    ("serve", "--batch-window-ms"): "WEE",  # 0: no pooling window
    ("serve", "--max-file-segments"): "EEW",  # huge: --max-queue is the limit then
    ("serve", "--max-file-chars"): "EEW",
    ("serve", "--max-unzipped-bytes"): "EEW",
    ("serve", "--max-glossary-entries"): "EEW",
    ("eval", "--min-term-accuracy"): "EEE",  # without --glossary: one line, any value
    # --threads is checked first, before any file: 1 to MAX_THREADS
    ("translate", "--threads"): "EEE",
    ("eval", "--threads"): "EEE",
    ("score", "--threads"): "EEE",
    ("export", "--threads"): "EEE",
    ("import", "--threads"): "EEE",
    ("serve", "--threads"): "EEE",
}


def numeric_config_keys() -> list[str]:
    """`section.key` of every int/float (or list of them) field, corpora's as data.corpora.*."""
    keys = []

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            hint = hints[f.name]
            bare = [a for a in typing.get_args(hint) if a is not type(None)]
            if len(bare) == 1 and type(None) in typing.get_args(hint):
                hint = bare[0]  # `float | None`: a number that may be left unset
            args = typing.get_args(hint)
            item = args[0] if typing.get_origin(hint) is list else None
            if dataclasses.is_dataclass(hint):
                walk(hint, f"{prefix}{f.name}.")
            elif item is not None and dataclasses.is_dataclass(item):
                walk(item, f"{prefix}{f.name}.")
            elif hint in (int, float) or item in (int, float):
                keys.append(prefix + f.name)

    walk(Config, "")
    return keys


def _bare(hint: typing.Any) -> typing.Any:
    """`int` from `Annotated[int | None, ...]`."""
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if len(args) == 1 else hint


def numeric_flags() -> dict[tuple[str, str], type]:
    """(command, --flag) -> int or float, for every numeric option of every `mt` command."""
    found = {}
    for command in app.registered_commands:
        name = command.name or command.callback.__name__.replace("_", "-")
        hints = typing.get_type_hints(command.callback, include_extras=True)
        for param, hint in hints.items():
            meta = typing.get_args(hint)[1:] if typing.get_origin(hint) is typing.Annotated else ()
            info = next((m for m in meta if isinstance(m, typer.models.OptionInfo)), None)
            if info is None or _bare(hint) not in (int, float):
                continue
            decls = [d for d in (info.param_decls or ()) if d.startswith("--")]
            flag = max(decls, key=len) if decls else "--" + param.rstrip("_").replace("_", "-")
            found[(name, flag)] = _bare(hint)
    return found


def test_the_table_covers_every_numeric_option():
    assert sorted(CONFIG_TABLE) == sorted(numeric_config_keys())
    assert sorted(FLAG_TABLE) == sorted(numeric_flags())


# -- the values every case runs with (on support.tasks.write_five_sentence_task) -----------------


def value_for(key_type: type, which: str) -> int | float:
    if which == "huge":
        return HUGE_INT if key_type is int else HUGE_FLOAT
    return VALUES[which]


def field_type(key: str) -> type:
    node: typing.Any = Config
    for part in key.split("."):
        hint = typing.get_type_hints(node)[part]
        if typing.get_origin(hint) is list:
            hint = typing.get_args(hint)[0]
        node = hint
    return node


def assert_one_error_line(rc: int, err: str, names: str) -> None:
    assert rc != 0, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert names in lines[0], lines[0]


CHEAP = {"train.keep_last": 0, "train.eval_bleu": "false", "train.tensorboard": "false"}
NEEDS_DEV_BLEU = ("train.watch.", "train.tune_", "train.patience", "train.keep_last")

CONFIG_CASES = [
    (key, which, row[0][i]) for key, row in CONFIG_TABLE.items() for i, which in enumerate(VALUES)
]


@pytest.mark.parametrize(("key", "which", "expect"), CONFIG_CASES)
def test_config_value_at_extreme(key, which, expect, tmp_path, capsys, monkeypatch):
    config = write_five_sentence_task(tmp_path)
    value = value_for(field_type(key), which)
    extra = list(CONFIG_TABLE[key][1]) if len(CONFIG_TABLE[key]) > 1 else []
    if key == "data.corpora.weight":
        raw = yaml.safe_load(config.read_text())
        raw["data"]["corpora"] = [{"name": "train", "weight": value}]
        config.write_text(yaml.safe_dump(raw))
        sets = []
    elif key.startswith("train.watch."):  # an entry of a list: written into the file
        raw = yaml.safe_load(config.read_text())
        data = tmp_path / "data"
        watch = {"name": "general", "src": str(data / "val.src"), "ref": str(data / "val.tgt")}
        raw["train"]["watch"] = [{**watch, key.rsplit(".", 1)[1]: value}]
        config.write_text(yaml.safe_dump(raw))
        sets = []
    elif key == "train.optimizer_betas":
        sets = [f"{key}=[{value}, {value}]"]
    elif key in ("train.tune_beam", "train.tune_alpha"):
        sets = [f"{key}=[{value}]"]
    elif key.startswith("train.dropout_by_epochs."):
        rule = {"epochs": 5, "dropout": 0.1, key.rsplit(".", 1)[1]: value}
        sets = [f"train.dropout_by_epochs.{k}=[{v}]" for k, v in rule.items()]
    else:
        sets = [f"{key}={value}"]
    if key == "train.max_steps" and which != "huge":
        extra = []
    # A working run's checkpoints, dev translation and TensorBoard events are not what these
    # cases test: the fewest of them (those that need dev BLEU keep the defaults).
    if not key.startswith(NEEDS_DEV_BLEU):
        extra += [f"{k}={v}" for k, v in CHEAP.items() if k != key]
    args = ["train", config, "--run-dir", tmp_path / "run"]
    for item in sets + extra:
        args += ["--set", item]

    rc, out, err = run_in_process(args, capsys, monkeypatch)

    if expect == "E":
        short = key.replace("data.corpora.", "data.corpora[0].").replace(
            "train.watch.", "train.watch[0]."
        )
        assert_one_error_line(rc, err, short)
        return
    if expect == "A" and rc != 0:
        assert_one_error_line(rc, err, "mt: error:")
        return
    assert rc == 0, err
    assert (tmp_path / "run" / "last.pt").is_file()
    if key.startswith("decode."):  # the run's decode settings are the checkpoint's
        rc, out, err = run_in_process(
            ["translate", tmp_path / "run" / "last.pt", "-i", tmp_path / "input.txt"],
            capsys,
            monkeypatch,
        )
        assert rc == 0, err
        assert len(out.splitlines()) == 3


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A checkpoint of the two-step model and the folder with its corpus."""
    folder = tmp_path_factory.mktemp("extremes")
    config = write_five_sentence_task(folder)
    mp = pytest.MonkeyPatch()
    mp.setattr(sys, "argv", ["mt", "train", str(config), "--run-dir", str(folder / "run")])
    try:
        main()
    except SystemExit as ex:
        assert not ex.code, ex.code
    finally:
        mp.undo()
    return folder


SAMPLING_FLAGS = ("--topk", "--topp", "--temperature", "--seed")


def flag_args(command: str, flag: str, folder: Path) -> list[object]:
    ckpt = folder / "run" / "last.pt"
    text = folder / "input.txt"
    if command == "translate":
        sample = ["--sample"] if flag in SAMPLING_FLAGS else []
        return ["translate", ckpt, "-i", text, "--device", "cpu", *sample]
    if command == "eval":
        return ["eval", ckpt, "--src", text, "--ref", text, "--device", "cpu"]
    if command == "score":
        return ["score", ckpt, "--src", text, "--tgt", text, "--device", "cpu"]
    if command == "attention":
        return ["attention", ckpt, "--src", "ka lo mi", "-o", folder / "attn.png"]
    if command == "serve":  # flags are checked before the model loads; a server never starts
        return ["serve", folder / "missing.pt"]
    if command == "export":
        return ["export", ckpt, folder / "exported", "--to", "marian"]
    if command == "shortlist":
        out = ["-o", folder / "sl.pt", "--force"]
        return ["shortlist", ckpt, "--source", text, "--target", text, *out]
    if command == "import":  # --threads is checked before the source is read
        return ["import", folder / "no-such-folder", "-o", folder / "imported.pt"]
    raise AssertionError(f"no arguments known for mt {command}")


FLAG_CASES = [
    (command, flag, which, outcomes[i])
    for (command, flag), outcomes in FLAG_TABLE.items()
    for i, which in enumerate(VALUES)
]


@pytest.mark.parametrize(("command", "flag", "which", "expect"), FLAG_CASES)
def test_flag_at_extreme(command, flag, which, expect, trained, capsys, monkeypatch):
    value = value_for(numeric_flags()[(command, flag)], which)
    args = [*flag_args(command, flag, trained), flag, value]

    rc, out, err = run_in_process(args, capsys, monkeypatch)

    if expect == "E":
        name = "BLEU" if flag == "--min-bleu" else flag
        assert_one_error_line(rc, err, name)
        return
    if expect == "A":  # a gate that may trip: exit 0, or exit 1 with its line naming the flag
        assert "Traceback" not in err, err
        assert rc == 0 or (rc == 1 and flag in err.strip().splitlines()[-1]), err
        return
    if command == "serve":  # accepted: the next check, the checkpoint, is what stops it
        assert_one_error_line(rc, err, "missing.pt: checkpoint not found")
        assert flag not in err
        return
    assert rc == 0, err
    assert "Traceback" not in err
    if command == "translate":
        assert len(out.splitlines()) == 3
    if command == "attention":
        assert (trained / "attn.png").is_file()


def test_a_model_too_big_for_the_machine_is_one_line(tmp_path, capsys, monkeypatch):
    """Within every bound but ~10^12 parameters: refused before any tensor is allocated."""
    config = write_five_sentence_task(tmp_path)
    sets = ["model.d_model=65536", "model.n_heads=8", "model.d_ff=262144"]
    args = ["train", config, "--run-dir", tmp_path / "run"]
    for item in sets:
        args += ["--set", item]

    rc, out, err = run_in_process(args, capsys, monkeypatch)

    assert_one_error_line(rc, err, "model.d_model")
    assert "GiB" in err
