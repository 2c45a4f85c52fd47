"""TensorBoard: a second sink of the metrics log, plus what only a picture shows.

`train.tensorboard` is `auto` (on when the `tensorboard` package is installed), `true` (a run
without the package stops at the start with one line, not after an hour of training) or
`false`. Events go to `RUN_DIR/tensorboard/`, so `tensorboard --logdir runs/` lists every run
under its run directory's name.

- Scalars: every number of every `metrics.jsonl` record, at the record's step: a log interval
  under `train/` (`train/loss`, `train/lr`, `train/tgt_tokens_per_s`, ...), an evaluation under
  `dev/` without its `valid_`/`dev_` prefix (`dev/loss`, `dev/ppl`, `dev/bleu`, ...), a watched
  set's (`train.watch`) under `watch/NAME/` (`watch/general/bleu`, `watch/general/loss`). Records
  of neither kind (the fine-tuning start, the stop) have no curve.
- At each evaluation: three fixed dev sentences (source, reference, this step's greedy
  translation) as text, and the encoder-decoder attention of the first as an image, drawn by
  the code behind `mt attention` (needs matplotlib; without it the image is left out with one
  note at the start). The attention needs the model and is computed at once; the picture is
  drawn on a thread while the trainer writes its checkpoints (`wait` joins it).
- At the start of a fresh run: the config and the parameter count as text; at the end, the
  hyperparameters with the final dev score for the HParams tab.

A resumed run opens the writer with `purge_step` one past the step of `last.pt`: events that
the interrupted run wrote after its checkpoint are hidden, so each curve has each step once, in
order. Only rank 0 writes.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import threading
from pathlib import Path
from typing import Any

import torch
import yaml

from mt.config import Config
from mt.errors import MtError
from mt.train.evaluation import Evaluation, Evaluator, attention_picture
from mt.views.attention import AttentionView

FOLDER = "tensorboard"
EXAMPLES = 3  # dev sentences shown at each evaluation


def enabled(setting: str | bool) -> bool:
    """Whether this run writes TensorBoard events; `True` without the package is an error."""
    if setting is False:
        return False
    try:
        import tensorboard  # noqa: F401
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        if setting is True:
            raise MtError(
                "train.tensorboard is true but the tensorboard package is not installed: "
                "pip install 'mt[tensorboard]', or set train.tensorboard to auto or false"
            ) from None
        return False
    return True


def can_draw() -> bool:
    """Whether attention images can be drawn (matplotlib, the `[plot]` extra)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def tag(group: str, key: str) -> str:
    """The stable tag of one record key: `train/loss`, `dev/bleu` (for `dev_bleu`), ...; a
    watched set's under its own name: `watch/general/bleu` (for `watch_bleu/general`)."""
    if key.startswith("watch_") and "/" in key:
        metric, name = key.removeprefix("watch_").split("/", 1)
        return f"watch/{name}/{metric}"
    if group == "dev":
        for prefix in ("valid_", "dev_"):
            if key.startswith(prefix):
                key = key[len(prefix) :]
    return f"{group}/{key}"


def scalars(record: dict[str, Any]) -> tuple[str, dict[str, float]] | None:
    """The tags and values a `metrics.jsonl` record becomes, or None for a record without
    curves (not a log interval, not an evaluation)."""
    if "loss" in record:
        group = "train"
    elif "valid_loss" in record:
        group = "dev"
    else:
        return None
    values = {
        tag(group, k): float(v)
        for k, v in record.items()
        if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    return group, values


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or " "


def example_markdown(source: str, reference: str, translation: str, step: int) -> str:
    """One dev sentence as a small markdown table (TensorBoard renders text as markdown)."""
    return (
        "| | |\n|---|---|\n"
        f"| source | {_cell(source)} |\n"
        f"| reference | {_cell(reference)} |\n"
        f"| translation (step {step}) | {_cell(translation)} |"
    )


def hparams(cfg: Config) -> dict[str, Any]:
    """The settings runs are compared by: the model, tokenizer and optimisation keys."""
    t = cfg.train
    out: dict[str, Any] = {f"model.{k}": v for k, v in dataclasses.asdict(cfg.model).items()}
    out["tokenizer.vocab_size"] = cfg.tokenizer.vocab_size
    out["data.pair"] = f"{cfg.data.src_lang}-{cfg.data.tgt_lang}"
    for key in (
        "seed", "max_tokens", "accum_steps", "schedule", "lr", "lr_scale", "warmup",
        "label_smoothing", "clip_norm", "weight_decay", "max_steps", "precision",
    ):  # fmt: skip
        out[f"train.{key}"] = getattr(t, key)
    return out


class TensorBoardSink:
    """Writes the metrics log's records as scalars, and the evaluation extras, as events."""

    def __init__(
        self, run_dir: Path, resumed_step: int | None, cfg: Config, model: torch.nn.Module
    ) -> None:
        """`resumed_step`: the step of the `last.pt` a resumed run starts from (None: a fresh
        run, which starts with its config and size at step 0). The whole config `cfg` is
        taken because it is what a fresh run shows (`write_start`); nothing else reads it."""
        from torch.utils.tensorboard import SummaryWriter

        self._drawing: threading.Thread | None = None
        self._failed: BaseException | None = None
        purge = None if resumed_step is None else resumed_step + 1
        self.writer = SummaryWriter(log_dir=str(run_dir / FOLDER), purge_step=purge)
        if resumed_step is None:
            params = list(model.parameters())
            trained = sum(p.numel() for p in params if p.requires_grad)
            self.write_start(cfg, sum(p.numel() for p in params), trained)
        self.draw = can_draw()
        if self.draw:  # pay matplotlib's import now, not inside the first evaluation
            from mt.plot import pyplot

            pyplot()
        else:
            print(
                "note: TensorBoard gets no attention images: matplotlib is missing "
                "(pip install 'mt[plot]')",
                file=sys.stderr,
                flush=True,
            )

    def write(self, record: dict[str, Any]) -> None:
        found = scalars(record)
        if found is None:
            return
        for name, value in found[1].items():
            self.writer.add_scalar(name, value, record["step"])

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.wait()
        self.writer.close()

    def write_start(self, cfg: Config, n_params: int, trainable: int) -> None:
        """The config and the parameter count, at step 0 of a fresh run."""
        text = yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False)
        self.writer.add_text("run/config", "\n".join("    " + x for x in text.splitlines()), 0)
        self.writer.add_text(
            "run/parameters", f"{n_params:,} parameters ({trainable:,} trained)", 0
        )

    def show_evaluation(self, step: int, evaluate: Evaluator, evaluation: Evaluation) -> None:
        """A few dev translations, and the attention behind the first, at this step. The
        attention is computed here (it needs the model); its picture is drawn and written on a
        thread while the trainer saves its checkpoints, and `wait` joins it. A model whose dev
        loss is not finite (a diverging run) has no attention worth drawing, and search finds
        no hypothesis with it."""
        examples = evaluate.examples(evaluation.hypotheses, EXAMPLES)
        self.write_examples(step, examples)
        if self.draw and examples and math.isfinite(evaluation.metrics["valid_loss"]):
            title, views = evaluate.attention_views(examples[0][0], step)
            self.wait()
            self._drawing = threading.Thread(
                target=self._draw, args=(title, views, step), name="tensorboard-attention"
            )
            self._drawing.start()

    def _draw(self, title: str, views: list[AttentionView], step: int) -> None:
        try:
            self.writer.add_figure("dev/attention", attention_picture(title, views), step)
        except BaseException as err:  # noqa: BLE001 - raised again by `wait`, in the trainer
            self._failed = err

    def wait(self) -> None:
        """Until the attention picture of the latest evaluation is written; an error while
        drawing it is raised here."""
        if self._drawing is not None:
            self._drawing.join()
            self._drawing = None
        if self._failed is not None:
            err, self._failed = self._failed, None
            raise err

    def write_examples(self, step: int, examples: list[tuple[str, str, str]]) -> None:
        """(source, reference, translation) triples as text."""
        for i, (src, ref, hyp) in enumerate(examples, 1):
            self.writer.add_text(f"dev/example_{i}", example_markdown(src, ref, hyp, step), step)

    def write_hparams(self, cfg: Config, metrics: dict[str, float], step: int) -> None:
        """The run's settings and final dev scores, for the HParams tab (same event file)."""
        from torch.utils.tensorboard.summary import hparams as hparams_summary

        final = {f"hparam/{tag('dev', k).split('/', 1)[1]}": v for k, v in metrics.items()}
        for summary in hparams_summary(hparams(cfg), final):
            self.writer.file_writer.add_summary(summary)
        for name, value in final.items():
            self.writer.add_scalar(name, value, step)
