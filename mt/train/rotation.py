"""The checkpoints a run keeps: `last.pt`, `best.pt`, the last `keep_last` step checkpoints
and, at the end, `averaged.pt` of the last `average_last` of them.

Every file carries the run's id (`run_id`), so that tools handed checkpoints of several runs
can tell them apart. A run that trains an adapter (`finetune.adapter`) writes adapter files:
the adapter's weights and its base's fingerprint, no copy of the base. Writing goes through
`mt.checkpoint` (atomic); a model with non-finite weights is never written, so a good
checkpoint is never replaced by a broken one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from mt import checkpoint
from mt.adapt.files import BaseRef
from mt.adapt.files import payload as adapter_payload
from mt.adapt.lora import LoraSpec
from mt.config import Config
from mt.errors import EXIT_DIVERGED, MtError
from mt.tokenizer import Tokenizer


class Checkpoints:
    """Writes and rotates the checkpoints of one run directory (rank 0 only).

    It holds the whole config `cfg` because every checkpoint carries it (what `mt translate`,
    `--resume` and fine-tuning read back); of its own settings it reads only
    `train.keep_last`.
    """

    def __init__(
        self,
        run_dir: Path,
        cfg: Config,
        tokenizer: Tokenizer,
        model: torch.nn.Module,
        run_id: str,
        adapter: tuple[LoraSpec, BaseRef] | None = None,
        origin: dict[str, Any] | None = None,
    ) -> None:
        self.run_dir, self.cfg, self.tokenizer, self.model = run_dir, cfg, tokenizer, model
        self.run_id = run_id
        self.adapter = adapter  # an adapter run writes the adapter alone (mt.adapt.files)
        # What the training data was made from (mt.distill: the teachers), in every file.
        self.origin = {"origin": origin} if origin else {}

    def save(
        self,
        name: str,
        step: int,
        train_state: dict[str, Any] | None = None,
        **extra: Any,
    ) -> Path:
        """Write `run_dir/name`; `train_state` (optimizer, RNG, counters) makes it resumable."""
        path = self.run_dir / name
        finite = torch.stack([torch.isfinite(p).all() for p in self.model.parameters()]).all()
        if not bool(finite):
            raise MtError(
                f"{path}: not written: the model has non-finite weights at step {step}",
                EXIT_DIVERGED,
            )
        more = {"step": step, "train_state": train_state, "run_id": self.run_id}
        more |= self.origin | extra
        if self.adapter is not None:
            data = adapter_payload(self.cfg, self.model, *self.adapter, **more)
        else:
            data = checkpoint.payload(self.cfg, self.tokenizer, self.model, **more)
        checkpoint.save(data, path)
        return path

    def step_checkpoints(self) -> list[Path]:
        """`checkpoint_STEP.pt` files in the run directory, oldest step first."""
        return sorted(self.run_dir.glob("checkpoint_*.pt"), key=lambda p: int(p.stem.split("_")[1]))

    def save_step(self, step: int) -> None:
        """Write `checkpoint_STEP.pt` and drop all but the last `keep_last` of them."""
        keep = self.cfg.train.keep_last
        if not keep:
            return
        self.save(f"checkpoint_{step}.pt", step)
        for old in self.step_checkpoints()[:-keep]:
            old.unlink(missing_ok=True)

    def average_last(self, n: int) -> Path:
        """`averaged.pt`: the mean weights of the last `n` step checkpoints."""
        out = self.run_dir / "averaged.pt"
        data = checkpoint.average(self.step_checkpoints()[-n:])
        data["run_id"] = self.run_id
        checkpoint.save(data, out)
        return out
