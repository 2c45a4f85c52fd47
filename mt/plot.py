"""Pictures: attention heatmaps and training curves (matplotlib, the optional `[plot]` extra).

Drawing only; the numbers come from `mt.views.attention` and the run's `metrics.jsonl`.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from mt.errors import MtError
from mt.views.attention import AttentionView
from mt.views.vectors import WordVectors


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend (importing it takes a few tenths of a
    second, which a caller may want to pay up front)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only; no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise MtError("plotting needs matplotlib: pip install 'mt[plot]'") from None
    return plt


def attention_figure(views: list[AttentionView], title: str, head: int | None) -> Any:
    """One row per attention kind; one panel per head, or the head average when `head` is None
    (or a single head when it is an index)."""
    plt = pyplot()
    n_heads = views[0].weights.size(0)
    heads: list[int | None]
    if head is None:
        heads = [None]
    elif head == -1:
        heads = list(range(n_heads))
    else:
        heads = [head]
    cols = len(heads)
    # Panels grow with the sentence (about 0.2 inch per token, 7-pt labels) so a long dev
    # sentence's labels stay legible; short ones keep the 3.6 x 3.4 inch minimum.
    panel_w = max(3.6, 0.2 * max(len(v.cols) for v in views) + 1.6)
    panel_h = max(3.4, 0.2 * max(len(v.rows) for v in views) + 1.6)
    fig_w = panel_w * cols + 1
    fig, axes = plt.subplots(len(views), cols, figsize=(fig_w, panel_h * len(views)), squeeze=False)
    for r, view in enumerate(views):
        for c, h in enumerate(heads):
            w = view.weights.float().mean(0) if h is None else view.weights[h].float()
            ax = axes[r][c]
            image = ax.imshow(w.cpu().numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            fig.colorbar(image, ax=ax, fraction=0.046, pad=0.03, label="attention weight")
            ax.set_xticks(range(len(view.cols)), view.cols, rotation=90, fontsize=7)
            ax.set_yticks(range(len(view.rows)), view.rows, fontsize=7)
            label = "mean of heads" if h is None else f"head {h}"
            ax.set_title(f"{view.name}\n{label}", fontsize=8)
    width = int(fig_w * 11)  # characters that fit across the figure at 9 pt
    fig.suptitle(textwrap.fill(title, width), fontsize=9)
    fig.tight_layout()
    return fig


def vectors_figure(vectors: WordVectors) -> Any:
    """One path per occurrence from its embedding (E) through each encoder layer (1, 2, ...),
    in the shared PCA plane; each occurrence has its own colour and its context as label."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 6))
    colours = plt.get_cmap("tab10")
    for k, occ in enumerate(vectors.occurrences):
        xy = occ.xy
        colour = colours(k % 10)
        ax.plot(xy[:, 0], xy[:, 1], "-", color=colour, alpha=0.7, label=occ.context)
        ax.scatter(xy[1:, 0], xy[1:, 1], color=colour, s=30, zorder=3)
        ax.scatter(xy[:1, 0], xy[:1, 1], color=colour, s=30, marker="s", zorder=3)
        for d, (x, y) in enumerate(xy):
            ax.annotate(
                "E" if d == 0 else str(d),
                (x, y),
                fontsize=7,
                color=colour,
                xytext=(4, 4),
                textcoords="offset points",
            )
        ax.annotate(
            occ.context,
            xy[-1],
            fontsize=8,
            color=colour,
            xytext=(6, -10),
            textcoords="offset points",
        )
    ev = vectors.explained
    ax.set_xlabel(f"PC 1 ({100 * ev[0]:.0f}% of the variance of the points drawn)")
    ax.set_ylabel(f"PC 2 ({100 * ev[1]:.0f}%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    n = len(vectors.depths) - 1
    title = (
        f"\u201c{vectors.word}\u201d: embedding + position (E, square), then encoder layers 1-{n}"
    )
    if vectors.centred:
        title += "\nrelative to the mean of all occurrences at each depth"
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def read_metrics(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise MtError(f"{path}: no metrics log (is this an mt run directory?)")
    records = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            raise MtError(f"{path}:{i}: not a JSON line") from None
    return records


def curves_figure(records: list[dict[str, Any]], title: str) -> Any:
    """Training and validation loss, dev BLEU and learning rate against the step."""
    plt = pyplot()

    def series(key: str) -> tuple[list[int], list[float]]:
        pts = [(r["step"], r[key]) for r in records if key in r and "step" in r]
        return [p[0] for p in pts], [p[1] for p in pts]

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    ax = axes[0]
    for key, label in (("loss", "train loss"), ("valid_loss", "valid loss")):
        x, y = series(key)
        if x:
            ax.plot(x, y, label=label, marker="." if key == "valid_loss" else None)
    ax.set_xlabel("step")
    ax.set_ylabel("label-smoothed loss per token")
    ax.legend()
    x, y = series("dev_bleu")
    axes[1].plot(x, y, marker="o", color="tab:green")
    axes[1].set_xlabel("step")
    axes[1].set_ylabel("dev BLEU (greedy)")
    x, y = series("lr")
    axes[2].plot(x, y, color="tab:red")
    axes[2].set_xlabel("step")
    axes[2].set_ylabel("learning rate")
    for a in axes:
        a.grid(alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def save_figure(fig: Any, out: Path) -> None:
    try:
        fig.savefig(out, dpi=110)
    except OSError as err:
        raise MtError(f"{out}: cannot write ({err.strerror})") from None
    finally:
        pyplot().close(fig)
