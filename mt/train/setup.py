"""Before the first step, in named phases: the process, how the run starts, its data, its model
and the state it continues from, and where its records go.

`Trainer.__init__` calls them in this order, which matters: the seeds are set before the model's
weights are drawn, the start is decided before the run directory is taken (a run that continues
is not refused), and the metrics log is trimmed to the restored step before anything is logged.
Each phase receives the section of the config it reads.

How a run starts is decided once (`decide_start`), rank 0's run directory deciding for every
rank:

- "fresh": a new run directory, random weights;
- "init_from": fine-tuning, the weights and tokenizer of `train.init_from` (`finetune`);
- "resume": `--resume` with a `last.pt`, which brings back the model, optimizer, RNG and data
  position (`resume`);
- "restart": the same, because torchrun started its workers again (`--max-restarts`) or a
  launcher of the same job was started again.
"""

from __future__ import annotations

import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from mt import checkpoint
from mt.adapt.keep import Keep
from mt.adapt.lora import param_groups
from mt.config import Config, DataConfig, ModelConfig, TrainConfig
from mt.data.loader import TrainingSet
from mt.data.prepare import Prepared
from mt.device import (
    Precision,
    Threads,
    choose_threads,
    planless_attention,
    resolve_device,
    resolve_precision,
    set_threads,
    usable_cores,
)
from mt.model import Transformer
from mt.tokenizer import Tokenizer
from mt.train import distributed, finetune, tensorboard
from mt.train.averaging import Ema
from mt.train.distributed import Dist
from mt.train.evaluation import DevSet, EvalSettings, Evaluator, dev_sets_of
from mt.train.metrics_log import JsonlSink, MetricsLog
from mt.train.resume import decide, read_last, restore, trim_metrics
from mt.train.state import TrainState
from mt.train.update import Update
from mt.translation.session import Session


@dataclass(frozen=True)
class Process:
    """Who this process is and what it runs on."""

    threads: Threads
    dist: Dist
    device: torch.device
    precision: Precision  # the choice and why


def process(t: TrainConfig) -> Process:
    """Threads, device, torchrun's process group, precision, then the seeds (before any weight
    is drawn). torchrun's processes on this machine share its cores (LOCAL_WORLD_SIZE)."""
    threads = choose_threads(
        usable_cores(),
        t.threads or None,
        "train.threads",
        processes=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
    )
    set_threads(threads)
    dist, device = distributed.init(
        resolve_device(t.device, "train.device"), t.collective_timeout_s
    )
    planless_attention(device)
    precision = resolve_precision(t.precision, device)
    torch.manual_seed(t.seed + dist.rank)  # DDP copies rank 0's weights; dropout differs
    random.seed(t.seed)
    return Process(threads, dist, device, precision)


@dataclass(frozen=True)
class Start:
    """How the run starts (see the module's docstring)."""

    how: str  # "fresh", "init_from", "resume" or "restart"
    resume: bool  # asked to continue (--resume or a restart), whether or not a last.pt exists
    last: Path  # the run's last.pt, continued from when `resumed`
    init: finetune.Init | None  # what fine-tuning takes from train.init_from

    @property
    def resumed(self) -> bool:
        return self.how in ("resume", "restart")


def decide_start(cfg: Config, run_dir: Path, flag: bool, p: Process) -> Start:
    """Decide how the run starts. Fine-tuning makes `cfg` the fine-tuning run's config: its
    train, model and tokenizer sections become what `finetune.load_init` returns (the model
    and tokenizer of the checkpoint), here, the one place the run's config changes."""
    resume, resumed = decide(p.dist, p.device, run_dir, flag)
    given = finetune.Sections(cfg.train, cfg.model, cfg.tokenizer, cfg.finetune)
    init, sections = finetune.load_init(given, run_dir, resume, log=p.dist.main)
    cfg.train, cfg.model, cfg.tokenizer = sections.train, sections.model, sections.tokenizer
    cfg.finetune = sections.finetune
    if resumed:
        how = "resume" if flag else "restart"
    else:
        how = "init_from" if init is not None else "fresh"  # (a resumed adapter's init: its base)
    return Start(how, resume, run_dir / "last.pt", init)


def data(prepared: Prepared, d: DataConfig) -> tuple[TrainingSet, list[DevSet]]:
    """The training set (its stores mixed as `prepared` weighs them) and the dev sets."""
    tok = prepared.tokenizer
    train_set = TrainingSet(
        prepared.train,
        prepared.weights,
        [tok.lang_id(s.tgt_lang) for s in prepared.sources] if tok.languages else None,
        d.lang_token,
        prepared.sampled,  # tokenizer.sample_alpha: one sampled copy per epoch
        [s.general for s in prepared.sources],  # finetune.keep_on: general
    )
    return train_set, dev_sets_of(prepared, d.max_valid_examples)


def model(
    m: ModelConfig, freeze: list[str], tokenizer: Tokenizer, device: torch.device, start: Start
) -> Transformer:
    """The model of the model section on `device`: random, or fine-tuning's weights; then
    `freeze` (`train.freeze`), or fine-tuning's adapter around the frozen weights."""
    net = checkpoint.build_model(m, tokenizer).to(device)
    finetune.init_model(start.init, net, freeze, tokenizer)
    return net


def update(cfg: Config, net: Transformer, tokenizer: Tokenizer, p: Process) -> Update:
    """The optimizer and its steps over `net`: with finetune.keep's frozen base beside it
    and finetune.lora_b_lr's parameter groups."""
    keep = Keep.of(cfg, tokenizer, p.device, log=p.dist.main)
    groups = param_groups(net, cfg.finetune.lora_b_lr)
    return Update(cfg.train, cfg.model, net, p.dist, p.device, p.precision.name, keep, groups)


def evaluator(
    cfg: Config,
    net: Transformer,
    tokenizer: Tokenizer,
    sets: list[DevSet],
    device: torch.device,
    precision: str,
    watch: list[DevSet] | None = None,
) -> Evaluator:
    """The evaluation, translating through a session over the model being trained
    (`Session.from_model`), the door `mt eval` uses. The session holds the whole config, as
    the run's checkpoints do: it decodes as their decode section says, into the data
    section's languages. It decodes in fp32 under the training's autocast
    (`Evaluator.translate`)."""
    session = Session.from_model(net, tokenizer, cfg, device, dtype="fp32")
    settings = EvalSettings.of(cfg.train, cfg.data)
    return Evaluator(session, settings, sets, precision, watch)


def continued(
    start: Start,
    seed: int,
    m: ModelConfig,
    p: Process,
    net: Transformer,
    update: Update,
    ema: Ema | None,
) -> TrainState:
    """A fresh state, or the one `last.pt` holds put back in place (model, optimizer, scaler,
    skipped-update counts, EMA, RNG)."""
    state = TrainState()
    if not start.resumed:
        return state
    data = read_last(p.dist, start.last, p.device)
    state = restore(data, start.last, m, net, update.optimizer, update.scaler, p.device)
    update.restore_counts(data["train_state"].get("skipped"))
    if ema is not None:
        ema.load_state_dict(data["train_state"].get("ema"))
    del data
    if p.dist.main:
        tqdm.write(f"resumed at step {state.step} from {start.last}", file=sys.stderr)
    if p.dist.active:  # last.pt holds rank 0's RNG: give each rank its own stream
        torch.manual_seed(seed + p.dist.rank + 100_003 * state.step)
    return state


def sinks(
    run_dir: Path,
    main: bool,
    start: Start,
    step: int,
    use_tensorboard: bool,
    cfg: Config,
    net: Transformer,
) -> tuple[MetricsLog, tensorboard.TensorBoardSink | None]:
    """The metrics log (rank 0's `metrics.jsonl`, trimmed to `step`, and TensorBoard when on,
    which shows the whole config `cfg`)."""
    if main:  # records a killed run wrote past its checkpoint are done again
        trim_metrics(run_dir / "metrics.jsonl", step)
    log = MetricsLog([JsonlSink(run_dir / "metrics.jsonl")] if main else [])
    board = None
    if use_tensorboard and main:
        board = tensorboard.TensorBoardSink(run_dir, step if start.resumed else None, cfg, net)
        log.sinks.append(board)
    return log, board


def start_line(net: Transformer, pairs: int, device: torch.device, how: str) -> str:
    """The start line's first part: the model's size (and the trained share, under
    train.freeze or an adapter on a frozen base), the data, the device and `how` it runs."""
    n_params = sum(p.numel() for p in net.parameters())
    trained = sum(p.numel() for p in net.parameters() if p.requires_grad)
    shown = f"{n_params / 1e6:.1f}M parameters"
    if trained < n_params:
        shown += f" ({trained:,} of them trained, {100 * trained / n_params:.2f}%)"
    return f"mt train: {shown}, {pairs:,} training pairs, device {device}, {how}"
