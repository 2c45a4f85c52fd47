"""YAML -> dataclasses, with every bad key, type or value reported with its key and file."""

from __future__ import annotations

from pathlib import Path

import pytest

from mt.config import Config, DataConfig, ModelConfig
from mt.config_file import expand_env, load_config, parse_override, save_config
from mt.errors import EXIT_USAGE, MtError

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_yaml_maps_onto_dataclasses(tmp_path):
    path = write(
        tmp_path,
        """
data:
  src_lang: fr
  tgt_lang: en
  format: tsv
model:
  d_model: 64
  n_heads: 4
  norm: pre
  dropout: 0
train:
  max_steps: 50
  optimizer_betas: [0.9, 0.99]
  lr: 0.001
decode:
  beam: 3
""",
    )
    cfg = load_config(path)
    assert isinstance(cfg, Config)
    assert (cfg.data.src_lang, cfg.data.tgt_lang, cfg.data.format) == ("fr", "en", "tsv")
    assert cfg.model == ModelConfig(d_model=64, n_heads=4, norm="pre", dropout=0.0)
    assert isinstance(cfg.model.dropout, float)  # an integer in YAML becomes the float it means
    assert cfg.train.max_steps == 50
    assert cfg.train.optimizer_betas == [0.9, 0.99]
    assert cfg.train.lr == 0.001
    assert cfg.decode.beam == 3
    # Keys not given keep their defaults.
    assert cfg.train.warmup == 4000
    assert cfg.decode.nbest == 1


def test_empty_file_gives_defaults(tmp_path, monkeypatch):
    monkeypatch.delenv("MT_DATA", raising=False)
    cfg = load_config(write(tmp_path, ""))
    assert cfg.model == ModelConfig()
    assert cfg.data.root == "data/multi30k"


def test_repository_tiny_config_loads():
    cfg = load_config(REPO / "configs" / "tiny.yaml")
    assert cfg.model.d_model == 64
    assert cfg.train.schedule == "inverse_sqrt"


def test_scientific_notation_is_a_number(tmp_path):
    # PyYAML reads `5e-4` (no dot) as a string; a learning rate written that way must still work.
    cfg = load_config(write(tmp_path, "train:\n  lr: 5e-4\n  optimizer_eps: 1e-9\n"))
    assert cfg.train.lr == pytest.approx(5e-4)
    assert cfg.train.optimizer_eps == pytest.approx(1e-9)
    cfg = load_config(write(tmp_path, ""), ["train.lr=2e-3"])
    assert cfg.train.lr == pytest.approx(2e-3)


def error_of(path: Path, overrides: list[str] | None = None) -> str:
    with pytest.raises(MtError) as info:
        load_config(path, overrides)
    assert info.value.code == EXIT_USAGE
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("model:\n  d_modle: 64\n", "model.d_modle"),
        ("trian:\n  max_steps: 5\n", "trian"),
        ("train:\n  max_steps: 5\n  colour: red\n", "train.colour"),
    ],
)
def test_unknown_key_names_key_and_file(tmp_path, text, key):
    path = write(tmp_path, text)
    message = error_of(path)
    assert str(path) in message
    assert f"unknown key '{key}'" in message


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("train:\n  max_steps: fifty\n", "train.max_steps"),
        ("train:\n  max_steps: 5.5\n", "train.max_steps"),
        ("train:\n  max_steps: true\n", "train.max_steps"),  # a bool is not an integer
        ("model:\n  dropout: high\n", "model.dropout"),
        ("model:\n  tie_embeddings: 1\n", "model.tie_embeddings"),
        ("model:\n  norm: middle\n", "model.norm"),
        ("data:\n  src_lang: 5\n", "data.src_lang"),
        ("train:\n  optimizer_betas: 0.9\n", "train.optimizer_betas"),
        ("train:\n  optimizer_betas: [0.9, x]\n", "train.optimizer_betas[1]"),
        ("model: 5\n", "model"),
        ("train:\n  compile: maybe\n", "train.compile"),
        ("decode:\n  dtype: fp8\n", "decode.dtype"),
    ],
)
def test_wrong_type_names_key_and_file(tmp_path, text, key):
    path = write(tmp_path, text)
    message = error_of(path)
    assert str(path) in message
    assert key in message


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("model:\n  d_model: 30\n  n_heads: 4\n", "model.d_model"),
        ("model:\n  d_model: 64\n  n_heads: 0\n", "model.n_heads"),
        ("train:\n  warmup: 0\n", "train.warmup"),
        ("train:\n  warmup: -5\n", "train.warmup"),
        ("train:\n  label_smoothing: 1.0\n", "train.label_smoothing"),
        ("model:\n  dropout: 1.5\n", "model.dropout"),
        ("decode:\n  beam: 2\n  nbest: 3\n", "decode.nbest"),
        ("data:\n  src_lang: en\n  tgt_lang: en\n", "data.src_lang"),
        ("tokenizer:\n  joint: false\n", "model.tie_embeddings"),
        ("train:\n  keep_last: 1\n  average_last: 2\n", "train.average_last"),
        ("train:\n  loader_workers: 100000\n", "train.loader_workers"),
        ("train:\n  loader_workers: -1\n", "train.loader_workers"),
        ("train:\n  max_bad_updates: 0\n", "train.max_bad_updates"),
        ("data:\n  corpora: [{name: a, weight: 0}]\n", "data.corpora[0].weight"),
        ("data:\n  corpora: [{weight: 1}]\n", "data.corpora[0].name"),
        ("data:\n  corpora: [{name: a, wieght: 1}]\n", "data.corpora[0].wieght"),
        ("data:\n  corpora: {name: a}\n", "data.corpora"),
        (
            "train:\n  watch: [{name: g, src: a.de, ref: a.en, keep_within: -1}]\n",
            "train.watch[0].keep_within",
        ),
        ("train:\n  watch: [{name: g, src: a.de}]\n", "train.watch[0].ref"),
        ("train:\n  watch: [{name: g, src: a.tmx, ref: a.en}]\n", "train.watch[0].ref"),
        ("train:\n  watch: [{src: a.de, ref: a.en}]\n", "train.watch[0].name"),
        ("train:\n  watch: [{name: 'a b', src: a.de, ref: a.en}]\n", "train.watch[0].name"),
        ("train:\n  watch: [{name: g, ref: a.en}]\n", "train.watch[0].src"),
        (
            "train:\n  watch: [{name: g, src: a, ref: b}, {name: g, src: c, ref: d}]\n",
            "train.watch[1].name",
        ),
        (
            "train:\n  watch: [{name: g, src: a, ref: b, max_examples: -1}]\n",
            "train.watch[0].max_examples",
        ),
        (
            "train:\n  eval_bleu: false\n  watch: [{name: g, src: a, ref: b, keep_within: 1}]\n",
            "train.watch[0].keep_within",
        ),
        (
            "train:\n  watch: [{name: g, src: a, ref: b, keepwithin: 1}]\n",
            "train.watch[0].keepwithin",
        ),
        (
            "train:\n  watch: [{name: g, src: a, ref: b, keep_within: much}]\n",
            "train.watch[0].keep_within",
        ),
        (
            "data:\n  pairs: [de-en, en-de]\ntrain:\n  watch: [{name: g, src: a, ref: b}]\n",
            "train.watch",
        ),
        ("finetune:\n  keep: kl\n  keep_weight: 0\n", "finetune.keep_weight"),
        ("finetune:\n  keep: always\n", "finetune.keep"),
        ("finetune:\n  keeps: kl\n", "finetune.keeps"),
        ("finetune:\n  keep: kl\ntrain:\n  init_vocab: new\n", "finetune.keep"),
        # keep: auto's term on self-replayed pairs needs the base's vocabulary too
        ("finetune:\n  replay_sources: a.de\ntrain:\n  init_vocab: new\n", "finetune.keep: auto"),
        ("finetune:\n  replay_sources: a.de\n  replay_weight: 0\n", "finetune.replay_weight"),
        ("finetune:\n  keep_on: general\n  replay_sources: a.de\n", "finetune.keep_on"),
        ("finetune:\n  keep: kl\n  keep_on: general\n", "finetune.keep_on"),
        ("finetune:\n  keep: kl\n  keep_on: some\n", "finetune.keep_on"),
        ("data:\n  corpora: [{name: a, general: maybe}]\n", "data.corpora[0].general"),
    ],
)
def test_impossible_value_names_key_and_file(tmp_path, text, key):
    path = write(tmp_path, text)
    message = error_of(path)
    assert str(path) in message
    assert key in message


def test_divisibility_message_gives_both_numbers(tmp_path):
    message = error_of(write(tmp_path, "model:\n  d_model: 30\n  n_heads: 4\n"))
    assert "30" in message and "4" in message and "model.n_heads" in message


def test_missing_file_and_bad_yaml(tmp_path):
    missing = tmp_path / "nope.yaml"
    assert str(missing) in error_of(missing)
    broken = write(tmp_path, "train:\n  max_steps: [1, 2\n")
    message = error_of(broken)
    assert str(broken) in message and "invalid YAML" in message
    listing = write(tmp_path, "- a\n- b\n", "list.yaml")
    assert "top level" in error_of(listing)


def test_overrides_apply_with_types(tmp_path):
    path = write(tmp_path, "train:\n  max_steps: 1000\nmodel:\n  d_model: 64\n  n_heads: 4\n")
    cfg = load_config(
        path,
        [
            "train.max_steps=50",
            "model.norm=pre",
            "train.optimizer_betas=[0.8, 0.9]",
            "train.eval_bleu=false",
            "model.dropout=0",
            "train.run_dir=runs/x y",
        ],
    )
    assert cfg.train.max_steps == 50
    assert cfg.model.norm == "pre"
    assert cfg.train.optimizer_betas == [0.8, 0.9]
    assert cfg.train.eval_bleu is False
    assert cfg.model.dropout == 0.0
    assert cfg.train.run_dir == "runs/x y"
    # A later override of the same key wins.
    assert load_config(path, ["train.max_steps=5", "train.max_steps=7"]).train.max_steps == 7


def test_override_of_section_absent_from_file(tmp_path):
    cfg = load_config(write(tmp_path, "model:\n  d_model: 64\n"), ["decode.beam=2"])
    assert cfg.decode.beam == 2
    cfg = load_config(write(tmp_path, "decode:\n"), ["decode.beam=3"])
    assert cfg.decode.beam == 3


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("train.max_steps=fifty", ["train.max_steps", "integer"]),
        ("train.max_step=5", ["unknown key 'train.max_step'"]),
        ("trian.max_steps=5", ["unknown key 'trian'"]),
        ("train=5", ["section"]),
        ("train.max_steps.x=5", ["unknown key"]),
        ("train.max_steps", ["KEY=VALUE"]),
        ("train.warmup=0", ["train.warmup must be > 0"]),
        ("model.norm=sideways", ["model.norm"]),
    ],
)
def test_bad_overrides(tmp_path, override, words):
    path = write(tmp_path, "")
    message = error_of(path, [override])
    for word in words:
        assert word in message
    assert override.split("=")[0] in message


def test_parse_override_reads_yaml_values():
    assert parse_override("train.max_steps=50") == ("train.max_steps", 50)
    assert parse_override("train.lr=0.5") == ("train.lr", 0.5)
    assert parse_override("data.root=a=b") == ("data.root", "a=b")
    assert parse_override("data.root=") == ("data.root", "")
    assert parse_override("train.eval_bleu=true") == ("train.eval_bleu", True)


def test_env_expansion(tmp_path, monkeypatch):
    path = write(
        tmp_path, "data:\n  root: ${MT_DATA:-fallback/dir}/x\ntrain:\n  run_dir: ${RUNS}\n"
    )
    monkeypatch.setenv("RUNS", "/tmp/runs")
    monkeypatch.delenv("MT_DATA", raising=False)
    cfg = load_config(path)
    assert cfg.data.root == "fallback/dir/x"
    assert cfg.train.run_dir == "/tmp/runs"
    monkeypatch.setenv("MT_DATA", "/data/m30k")
    assert load_config(path).data.root == "/data/m30k/x"
    monkeypatch.setenv("MT_DATA", "")  # set but empty counts as unset, like the shell's `:-`
    assert load_config(path).data.root == "fallback/dir/x"
    # Overrides are expanded too, and so is the other path of the data section.
    assert load_config(path, ["data.root=${RUNS}/d"]).data.root == "/tmp/runs/d"
    assert load_config(path, ["data.cache_dir=${RUNS}/c"]).data.cache_dir == "/tmp/runs/c"


def test_env_without_default_must_be_set(monkeypatch):
    monkeypatch.delenv("MT_NOT_SET_ANYWHERE", raising=False)
    with pytest.raises(MtError, match="MT_NOT_SET_ANYWHERE"):
        expand_env("${MT_NOT_SET_ANYWHERE}/data")
    assert expand_env("plain/$HOME/{x}") == "plain/$HOME/{x}"  # only ${NAME} is a reference


def test_default_data_root_uses_env(monkeypatch):
    monkeypatch.setenv("MT_DATA", "/somewhere")
    assert expand_env(DataConfig().root) == "/somewhere"


def test_save_config_round_trips(tmp_path):
    path = write(tmp_path, "model:\n  d_model: 64\n  n_heads: 4\ntrain:\n  lr: 0.01\n")
    cfg = load_config(path, ["decode.beam=2"])
    out = tmp_path / "resolved.yaml"
    save_config(cfg, out)
    assert load_config(out) == cfg
    assert not list(tmp_path.glob(".*.tmp-*"))


@pytest.mark.parametrize(
    "name", ["tiny", "demo", "multi30k_de_en", "multi30k_en_de", "multi30k_de_en_student"]
)
def test_shipped_configs_load(name, monkeypatch):
    monkeypatch.setenv("MT_DATA", "/data/m30k")
    cfg = load_config(REPO / "configs" / f"{name}.yaml")
    assert cfg.data.root == "/data/m30k"
    assert cfg.model.d_model % cfg.model.n_heads == 0
    if name == "demo":  # bounded by steps: the same result on a fast, slow or busy machine
        assert cfg.train.max_minutes == 0 and cfg.train.max_steps == 300
    elif name != "tiny":
        assert cfg.train.max_minutes == 30 and cfg.decode.beam == 5
        assert {cfg.data.src_lang, cfg.data.tgt_lang} == {"de", "en"}
    if name == "multi30k_de_en_student":  # a lighter decoder than the recipe's teacher's
        teacher = load_config(REPO / "configs" / "multi30k_de_en.yaml")

        def step_work(m):  # the weights a decoding step multiplies per hypothesis, roughly:
            own = 2 if m.decoder_self == "ssru" else 4  # SSRU's [W; W_f], or q, k, v and out
            return m.decoder_layers * ((own + 2) * m.d_model**2 + 2 * m.d_model * m.d_ff)

        assert step_work(cfg.model) <= 0.6 * step_work(teacher.model)
        assert cfg.model.encoder_layers >= teacher.model.encoder_layers
        assert cfg.distill.teachers == [f"{teacher.train.run_dir}/best.pt"]
        assert (
            (cfg.data.src_lang, cfg.data.tgt_lang)
            == ("de", "en")
            == (
                teacher.data.src_lang,
                teacher.data.tgt_lang,
            )
        )
