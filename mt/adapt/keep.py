"""What keeps a fine-tuned model close to its base: a KL term toward the frozen base.

Fine-tuning on a domain forgets what the base knew (docs/fine-tuning.md measures it). With
`finetune.keep: kl` the run holds the base it started from (`train.init_from`) in memory, frozen
and in eval mode, and every training batch goes through it too: the objective adds
`finetune.keep_weight` times the KL divergence from the base's next-token distribution to the
model's, per target token (word-level distillation toward the original model, Khayrallah et al.
2018, "Regularized Training Objective for Continued Training for Domain Adaptation"). On the
domain's batches it keeps the model's distributions from drifting further than the domain needs;
on batches of general text mixed in (`data.corpora`, replay) it keeps what the base did there.
With `finetune.keep_on: general` the term sees only the pairs of corpora marked `general` (the
replayed ones are): the domain's pairs then pull toward the domain unhindered, which a term on
every pair resists as much as forgetting (docs/fine-tuning.md measures both), and the general
pairs teach the base's whole next-token distribution rather than its one translation. Only
those rows go through the base, so the term costs what they hold.

The base is read from `train.init_from` when the run starts and again when it resumes (the
run's `last.pt` holds the trained model only), so a resumed run computes the same term. Under
torchrun every process holds its own base; it takes no gradient and is in no optimizer.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from mt import checkpoint
from mt.adapt.defaults import keeping
from mt.config import Config
from mt.device import autocast
from mt.errors import MtError
from mt.model import Transformer
from mt.tokenizer import Tokenizer


class Keep:
    """The frozen base and the weight of the term that keeps the model close to it."""

    def __init__(
        self, base: Transformer, weight: float, path: Path | None = None, on: str = "all"
    ) -> None:
        self.base = base.eval().requires_grad_(False)
        self.weight = weight
        self.path = path
        self.on = on  # finetune.keep_on: "all" pairs, or the "general" corpora's

    def rows(self, batch_general: torch.Tensor | None, n: int) -> torch.Tensor | None:
        """The rows of an `n`-row batch the term sees: None for all of them, else their
        indices (empty where the batch holds no general pair; `batch_general`: Batch.general)."""
        if self.on == "all":
            return None
        if batch_general is None:
            return torch.zeros(0, dtype=torch.long)
        return torch.nonzero(batch_general[:n]).flatten()

    @classmethod
    def of(
        cls, cfg: Config, tokenizer: Tokenizer, device: torch.device, log: bool = True
    ) -> Keep | None:
        """The run's Keep (None without the term: `finetune.keep: none`, or `auto` where the
        run does not self-replay): the base of `train.init_from`, built as the run's model is
        (its model section, the run's tokenizer) and on `device`."""
        f = cfg.finetune
        kept = keeping(f)
        if not kept.term:
            return None
        if not cfg.train.init_from:
            raise MtError(
                f"finetune.keep: {f.keep} needs train.init_from (the base to stay close to)"
            )
        path = Path(cfg.train.init_from)
        try:
            data = checkpoint.load(path)
        except MtError as err:
            raise MtError(f"finetune.keep: {err}") from None
        try:
            theirs = Tokenizer.from_stored({**data["tokenizer"], "languages": None})
        except Exception:
            raise MtError(f"finetune.keep: {path}: the embedded tokenizer cannot be read") from None
        if theirs.fingerprint() != tokenizer.fingerprint():
            raise MtError(
                f"finetune.keep: {path} (train.init_from) holds another tokenizer than the run's"
            )
        with torch.random.fork_rng(devices=[]):  # its random init draws nothing from the run's
            base = checkpoint.build_model(cfg.model, tokenizer)
        try:
            base.load_state_dict(data["model"])
        except RuntimeError:
            raise MtError(
                f"finetune.keep: {path}: its weights do not match the run's model config"
            ) from None
        if log:
            on = ", on the general corpora's pairs" if kept.on == "general" else ""
            how = "auto: kl" if kept.auto else "kl"
            print(
                f"finetune.keep: {how} (weight {kept.weight:g}{on}) toward the frozen base {path}",
                file=sys.stderr,
                flush=True,
            )
        return cls(base.to(device), kept.weight, path, kept.on)

    def reference(self, src: torch.Tensor, tgt_in: torch.Tensor, precision: str) -> torch.Tensor:
        """The base's next-token log-probabilities (B, T, V) in fp32 for the batch `src`,
        `tgt_in`, under the training's autocast `precision`, without a graph: what the model's
        are compared with (mt.train.loss.kl_to_reference)."""
        with torch.no_grad(), autocast(src.device, precision):
            logits = self.base(src, tgt_in)
        return F.log_softmax(logits.float(), dim=-1)
