"""The training loop: from a config to checkpoints in a run directory.

The run directory holds everything a run makes: the tokenizer (`spm*.model`), the resolved
`config.yaml`, `metrics.jsonl` (one JSON object per log interval and per evaluation), and the
checkpoints `last.pt` (with the full training state), `best.pt` (best dev BLEU) and the last
`keep_last` step checkpoints. `--resume` continues from `last.pt` with the same model,
optimizer, scaler, RNG and data position, so a resumed run follows the uninterrupted one.

Dev BLEU needs a decoder, so this module uses `mt.decode` and `mt.metrics` for evaluation only.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from mt.batching import Batch, collate, shard, token_batches
from mt.config import Config, DecodeConfig, save_config
from mt.data import Corpus, load_corpus, read_parallel
from mt.decode.translator import Translator
from mt.errors import MtError
from mt.metrics import bleu
from mt.tokenizer import PAD, Tokenizer, train_tokenizer
from mt.train import checkpoint, distributed
from mt.train.loss import label_smoothed_loss
from mt.train.schedule import learning_rate


@dataclass
class TrainState:
    """Where a run is; saved in `last.pt` so `--resume` continues at the same point."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of the current epoch already consumed
    elapsed: float = 0.0  # seconds of training so far, across resumes
    best_score: float = -math.inf  # dev BLEU, or minus validation loss without BLEU
    bad_evals: int = 0
    last_eval_step: int = -1


def has_amx() -> bool:
    """Whether the CPU has AMX tiles for bf16; only then is CPU bf16 faster than fp32."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return "amx_bf16" in f.read()
    except OSError:
        return False


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise MtError("train.device is 'cuda' but no CUDA device is available")
    return torch.device(name)


def resolve_precision(name: str, device: torch.device) -> str:
    """`auto`: bf16 on CUDA (fp16 where bf16 is missing), bf16 on CPU only with AMX."""
    if name == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return "bf16" if has_amx() else "fp32"
    if name == "fp16" and device.type != "cuda":
        raise MtError("train.precision fp16 needs CUDA (use bf16 or fp32 on CPU)")
    return name


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager[Any]:
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


class MetricsLog:
    """Appends one JSON object per line to `metrics.jsonl` (kept across resumes)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def _prepare_run_dir(run_dir: Path, resume: bool) -> None:
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise MtError(f"{run_dir}: run directory is not writable ({err.strerror})") from None
    if not resume and (run_dir / "last.pt").exists():
        raise MtError(
            f"{run_dir}: already holds a run (last.pt); pass --resume to continue it "
            "or --run-dir for a new one"
        )


def _tokenizer(cfg: Config, run_dir: Path) -> Tokenizer:
    tok = Tokenizer.load(run_dir)
    if tok is not None:
        return tok
    src, tgt = read_parallel(cfg.data, cfg.data.train)
    if cfg.data.max_train_examples:
        src, tgt = src[: cfg.data.max_train_examples], tgt[: cfg.data.max_train_examples]
    tok = train_tokenizer(src, tgt, cfg.tokenizer)
    tok.save(run_dir)
    return tok


def _rng_state(device: torch.device) -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


class Trainer:
    def __init__(self, cfg: Config, run_dir: Path, resume: bool = False) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        t = cfg.train
        if t.threads:
            torch.set_num_threads(t.threads)
        self.dist, self.device = distributed.init(resolve_device(t.device))
        self.precision = resolve_precision(t.precision, self.device)
        torch.manual_seed(t.seed + self.dist.rank)  # DDP copies rank 0's weights; dropout differs
        random.seed(t.seed)

        # Rank 0 makes the run directory, tokenizer and token cache; the others then read them.
        cache = Path(cfg.data.cache_dir) if cfg.data.cache_dir else run_dir / "cache"
        d = cfg.data
        for turn in (True, False):
            if self.dist.main == turn:
                if turn:
                    _prepare_run_dir(run_dir, resume)
                    self.tokenizer = _tokenizer(cfg, run_dir)
                else:
                    self.tokenizer = Tokenizer.load(run_dir)
                self.train_data = load_corpus(
                    d, d.train, self.tokenizer, cache, True, d.max_train_examples
                )
                self.valid_data = load_corpus(
                    d, d.valid, self.tokenizer, cache, False, d.max_valid_examples
                )
            distributed.barrier(self.dist)
        valid_src, valid_ref = read_parallel(d, d.valid)
        n_valid = len(self.valid_data)
        self.valid_src, self.valid_ref = valid_src[:n_valid], valid_ref[:n_valid]

        self.model = checkpoint.build_model(cfg, self.tokenizer).to(self.device)
        self.net: torch.nn.Module = self.model  # what training calls: the DDP wrapper if any
        self.optimizer = torch.optim.Adam(
            self.model.parameters(),
            lr=learning_rate(1, t, cfg.model),
            betas=(t.optimizer_betas[0], t.optimizer_betas[1]),
            eps=t.optimizer_eps,
            weight_decay=t.weight_decay,
            fused=True,  # one kernel for all parameters: ~3x faster steps than the default on CPU
        )
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")
        self.state = TrainState()
        if resume and (run_dir / "last.pt").exists():
            self._restore(run_dir / "last.pt")
            if self.dist.active:  # last.pt holds rank 0's RNG: give each rank its own stream
                torch.manual_seed(t.seed + self.dist.rank + 100_003 * self.state.step)
        if self.dist.active:
            ids = [self.device.index] if self.device.type == "cuda" else None
            # The only buffer is the constant sinusoid table: nothing to broadcast each step.
            self.net = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=ids, broadcast_buffers=False
            )
        if self.dist.main:
            save_config(cfg, run_dir / "config.yaml")
        self.log = MetricsLog(run_dir / "metrics.jsonl")
        self.sizes = [
            max(len(s), len(tg) + 1) for s, tg in zip(self.train_data.src, self.train_data.tgt)
        ]

    # -- checkpoints -------------------------------------------------------------------------

    def _restore(self, path: Path) -> None:
        data = checkpoint.load(path)
        if data.get("train_state") is None:
            raise MtError(f"{path}: holds no training state to resume from")
        if data["config"]["model"] != asdict(self.cfg.model):
            raise MtError(f"{path}: model config differs from the one being resumed")
        ts = data["train_state"]
        self.model.load_state_dict(data["model"])
        self.optimizer.load_state_dict(ts["optimizer"])
        self.scaler.load_state_dict(ts["scaler"])
        _set_rng_state(ts["rng"], self.device)
        self.state = TrainState(**ts["state"])

    def _save(self, path: Path, with_state: bool, **extra: Any) -> None:
        train_state = None
        if with_state:
            train_state = {
                "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict(),
                "rng": _rng_state(self.device),
                "state": asdict(self.state),
            }
        data = checkpoint.payload(
            self.cfg,
            self.tokenizer,
            self.model,
            step=self.state.step,
            train_state=train_state,
            **extra,
        )
        checkpoint.save(data, path)

    def _step_checkpoints(self) -> list[Path]:
        found = sorted(
            self.run_dir.glob("checkpoint_*.pt"), key=lambda p: int(p.stem.split("_")[1])
        )
        return found

    def _save_step_checkpoint(self) -> None:
        if not self.cfg.train.keep_last:
            return
        self._save(self.run_dir / f"checkpoint_{self.state.step}.pt", with_state=False)
        for old in self._step_checkpoints()[: -self.cfg.train.keep_last]:
            old.unlink(missing_ok=True)

    # -- evaluation --------------------------------------------------------------------------

    def _batches(self, corpus: Corpus, seed: int | None, epoch: int) -> list[list[int]]:
        sizes = (
            self.sizes
            if corpus is self.train_data
            else [max(len(s), len(t) + 1) for s, t in zip(corpus.src, corpus.tgt)]
        )
        return token_batches(sizes, self.cfg.train.max_tokens, seed, epoch)

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Validation loss (teacher forced) and greedy dev BLEU."""
        self.model.eval()
        loss_sum = nll_sum = 0.0
        ntok = 0
        data = self.valid_data
        limit = self.cfg.model.max_positions
        for idx in self._batches(data, None, 0):
            idx = [i for i in idx if len(data.src[i]) <= limit and len(data.tgt[i]) < limit]
            if not idx:
                continue
            b = collate([data.src[i] for i in idx], [data.tgt[i] for i in idx]).to(self.device)
            with autocast(self.device, self.precision):
                logits = self.model(b.src, b.tgt_in)
            loss, nll = label_smoothed_loss(logits, b.tgt_out, self.cfg.train.label_smoothing, PAD)
            loss_sum += float(loss)
            nll_sum += float(nll)
            ntok += b.tgt_tokens
        out = {
            "valid_loss": loss_sum / ntok,
            "valid_nll": nll_sum / ntok,
            "valid_ppl": math.exp(min(nll_sum / ntok, 50.0)),
        }
        if self.cfg.train.eval_bleu:
            dcfg = DecodeConfig(
                beam=1,
                nbest=1,
                max_len_a=self.cfg.decode.max_len_a,
                max_len_b=self.cfg.decode.max_len_b,
                max_tokens=self.cfg.decode.max_tokens,
            )
            translator = Translator(self.model, self.tokenizer, dcfg, self.device, greedy=True)
            with autocast(self.device, self.precision):
                hyps = [t.text for t in translator.translate_lines(self.valid_src)]
            out["dev_bleu"] = bleu(hyps, self.valid_ref)
        self.model.train()
        return out

    def _evaluate_and_save(self, start: float) -> None:
        """Validate and write checkpoints (rank 0). The time since `start` counts as training
        time before `last.pt` records it; patience is then a stop rule like the others."""
        s = self.state
        metrics = self.validate()
        s.elapsed += time.perf_counter() - start
        score = metrics.get("dev_bleu", -metrics["valid_loss"])
        improved = score > s.best_score
        if improved:
            s.best_score, s.bad_evals = score, 0
        else:
            s.bad_evals += 1
        s.last_eval_step = s.step
        self.log.write(
            {
                "step": s.step,
                "epoch": s.epoch,
                "elapsed": round(s.elapsed, 1),
                **{k: round(v, 4) for k, v in metrics.items()},
            }
        )
        if improved:
            self._save(self.run_dir / "best.pt", with_state=False, metrics=metrics)
        self._save_step_checkpoint()
        self._save(self.run_dir / "last.pt", with_state=True)
        tqdm.write(f"step {s.step}: " + " ".join(f"{k} {v:.3f}" for k, v in metrics.items()))

    # -- the loop ----------------------------------------------------------------------------

    def _update(self, group: list[Batch]) -> tuple[torch.Tensor, torch.Tensor, int]:
        """One optimizer step over `group` (gradient accumulation), loss per target token."""
        t = self.cfg.train
        lr = learning_rate(self.state.step + 1, t, self.cfg.model)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        ntok = sum(b.tgt_tokens for b in group)
        # DDP averages gradients over ranks, so scale by world / global tokens to get the
        # gradient of the loss per target token of the whole global batch.
        global_tok = distributed.sum_all(self.dist, [float(ntok)], self.device)[0]
        scale = self.dist.world / global_tok
        loss_sum = torch.zeros((), device=self.device)
        nll_sum = torch.zeros((), device=self.device)
        for i, b in enumerate(group):
            b = b.to(self.device)
            last = i == len(group) - 1
            sync = contextlib.nullcontext() if last or not self.dist.active else self.net.no_sync()
            with sync:
                with autocast(self.device, self.precision):
                    logits = self.net(b.src, b.tgt_in)
                loss, nll = label_smoothed_loss(logits, b.tgt_out, t.label_smoothing, PAD)
                self.scaler.scale(loss * scale).backward()
            loss_sum += loss.detach()
            nll_sum += nll.detach()
        self.scaler.unscale_(self.optimizer)
        if t.clip_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.step += 1
        return loss_sum, nll_sum, ntok

    def _stop_reason(self) -> str | None:
        t, s = self.cfg.train, self.state
        if s.step >= t.max_steps:
            return "max_steps"
        if t.max_epochs and s.epoch >= t.max_epochs:
            return "max_epochs"
        if t.max_minutes and s.elapsed >= 60 * t.max_minutes:
            return "max_minutes"
        if t.patience and s.bad_evals >= t.patience:
            return "patience"
        return None

    def train(self) -> TrainState:
        """Run until a stop rule fires. Ctrl-C or SIGTERM finishes the current update, saves
        `last.pt` and raises KeyboardInterrupt, so `--resume` loses nothing; a second Ctrl-C
        stops at once."""
        stop_signal: list[int] = []

        def on_signal(signum: int, frame: object) -> None:
            if stop_signal:
                raise KeyboardInterrupt
            stop_signal.append(signum)

        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                handlers[sig] = signal.signal(sig, on_signal)
        try:
            return self._loop(stop_signal)
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            distributed.shutdown(self.dist)

    def _loop(self, stop_signal: list[int]) -> TrainState:
        t, s = self.cfg.train, self.state
        self.model.train()
        main, d = self.dist.main, self.dist
        n_params = sum(p.numel() for p in self.model.parameters())
        if main:
            tqdm.write(
                f"mt train: {n_params / 1e6:.1f}M parameters, {len(self.train_data)} training "
                f"pairs, device {self.device}, precision {self.precision}, "
                f"{d.world} process(es), run dir {self.run_dir}"
            )
        bar = tqdm(
            total=t.max_steps,
            initial=s.step,
            unit="step",
            dynamic_ncols=True,
            disable=None if main else True,
        )
        window_loss = torch.zeros((), device=self.device)
        window_nll = torch.zeros((), device=self.device)
        window_tok = 0
        window_start = time.perf_counter()
        window_eval = 0.0  # evaluation time inside the window, left out of tokens/s
        reason = self._stop_reason()
        while reason is None:
            batches = shard(self._batches(self.train_data, t.seed, s.epoch), d.rank, d.world)
            if not batches:
                raise MtError(
                    f"train: fewer batches per epoch than processes ({d.world}); "
                    "lower train.max_tokens or use fewer processes"
                )
            while s.batch_in_epoch < len(batches) and reason is None:
                tick = time.perf_counter()
                chosen = batches[s.batch_in_epoch : s.batch_in_epoch + t.accum_steps]
                group = [
                    collate(
                        [self.train_data.src[i] for i in idx], [self.train_data.tgt[i] for i in idx]
                    )
                    for idx in chosen
                ]
                loss, nll, ntok = self._update(group)
                s.batch_in_epoch += len(chosen)
                window_loss += loss
                window_nll += nll
                window_tok += ntok
                s.elapsed += time.perf_counter() - tick
                bar.update(1)
                if s.step % t.log_every == 0:
                    span = time.perf_counter() - window_start - window_eval
                    w_loss, w_nll, w_tok = distributed.sum_all(
                        d, [float(window_loss), float(window_nll), float(window_tok)], self.device
                    )
                    rec = {
                        "step": s.step,
                        "epoch": s.epoch,
                        "loss": w_loss / w_tok,
                        "nll": w_nll / w_tok,
                        "lr": learning_rate(s.step, t, self.cfg.model),
                        "tgt_tokens_per_s": w_tok / span,
                        "elapsed": round(s.elapsed, 1),
                    }
                    if main:
                        self.log.write(rec)
                    bar.set_postfix(
                        loss=f"{rec['loss']:.3f}",
                        lr=f"{rec['lr']:.2e}",
                        tok_s=f"{rec['tgt_tokens_per_s']:.0f}",
                    )
                    window_loss.zero_()
                    window_nll.zero_()
                    window_tok = 0
                    window_start = time.perf_counter()
                    window_eval = 0.0
                if s.step % t.eval_every == 0:
                    tick = time.perf_counter()
                    if main:
                        self._evaluate_and_save(tick)
                    s.last_eval_step = s.step
                    if not main:
                        s.elapsed += time.perf_counter() - tick
                    window_eval += time.perf_counter() - tick
                # After the step's log and evaluation, so a resumed run misses neither.
                if distributed.agree(d, bool(stop_signal), self.device):
                    bar.close()
                    if main:
                        self._save(self.run_dir / "last.pt", with_state=True)
                        tqdm.write(f"interrupted at step {s.step}; saved {self.run_dir}/last.pt")
                    raise KeyboardInterrupt
                # Rank 0's clock decides the time budget, so all ranks stop at the same step.
                reason = self._stop_reason()
                if d.active:
                    stop = distributed.agree(d, reason is not None, self.device)
                    reason = (reason or "rank 0 stopped") if stop else None
            if s.batch_in_epoch >= len(batches):
                s.epoch += 1
                s.batch_in_epoch = 0
                if t.max_epochs and s.epoch >= t.max_epochs:  # the same on every rank
                    reason = reason or "max_epochs"
        bar.close()
        if main:
            if s.last_eval_step != s.step:
                self._evaluate_and_save(time.perf_counter())
            self.log.write(
                {
                    "step": s.step,
                    "stopped": reason,
                    "elapsed": round(s.elapsed, 1),
                }
            )
            if t.average_last:
                self.average_last(t.average_last)
        return s

    def average_last(self, n: int) -> Path:
        paths = self._step_checkpoints()[-n:]
        out = self.run_dir / "averaged.pt"
        checkpoint.save(checkpoint.average(paths), out)
        return out


def train(cfg: Config, run_dir: Path, resume: bool = False) -> TrainState:
    """Train (or resume) a model as `cfg` says; everything goes to `run_dir`."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return Trainer(cfg, run_dir, resume).train()
