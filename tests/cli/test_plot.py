"""`mt attention` and `mt plot`: the pictures show the model's own numbers."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("matplotlib")

from mt.checkpoint import load_model  # noqa: E402
from mt.plot import attention_figure, curves_figure, read_metrics  # noqa: E402
from mt.views.attention import AttentionView, sentence_attention  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def test_attention_views_are_the_models_weights(tiny_run):
    loaded = load_model(tiny_run / "best.pt")
    text, views = sentence_attention(
        loaded.model, loaded.tokenizer, "Ein Hund rennt.", loaded.cfg.decode, layer=-1
    )
    names = [v.name for v in views]
    assert names == [
        "encoder self-attention",
        "decoder self-attention",
        "encoder-decoder attention",
    ]
    heads = loaded.cfg.model.n_heads
    for v in views:
        assert v.weights.shape == (heads, len(v.rows), len(v.cols))
        torch.testing.assert_close(v.weights.sum(-1), torch.ones(heads, len(v.rows)))
    dec = views[1].weights
    future = torch.ones(dec.shape[-2:], dtype=torch.bool).triu(1)
    assert dec[:, future].abs().max() == 0  # no position attends to a later one
    assert views[0].rows[-1] == "</s>" and views[2].rows[-1] == "</s>"
    assert (
        loaded.tokenizer.decode_tgt(
            [loaded.tokenizer.tgt.piece_to_id(p) for p in views[1].cols[1:]]
        )
        == text
    )


def test_drawn_panels_hold_those_weights(tiny_run):
    loaded = load_model(tiny_run / "best.pt")
    _, views = sentence_attention(
        loaded.model, loaded.tokenizer, "Zwei Hunde spielen.", loaded.cfg.decode, layer=0
    )
    fig = attention_figure(views, "t", head=-1)  # every head
    axes = [ax for ax in fig.axes if ax.images]  # the panels, not their colour bars
    assert len(fig.axes) == 2 * len(axes)  # each panel has its colour scale
    assert len(axes) == 3 * loaded.cfg.model.n_heads
    for i, ax in enumerate(axes):
        view, head = views[i // loaded.cfg.model.n_heads], i % loaded.cfg.model.n_heads
        drawn = torch.as_tensor(ax.images[0].get_array().data)
        torch.testing.assert_close(drawn, view.weights[head].float())
    mean = attention_figure(views, "t", head=None)
    torch.testing.assert_close(
        torch.as_tensor([ax for ax in mean.axes if ax.images][2].images[0].get_array().data),
        views[2].weights.mean(0),
    )


def test_attention_and_plot_commands_write_pngs(tiny_run, mt_cli, tmp_path):
    out = tmp_path / "attn.png"
    result = mt_cli("attention", tiny_run / "best.pt", "--src", "Ein Hund rennt.", "-o", out)
    assert result.rc == 0, result.err
    assert out.read_bytes().startswith(PNG)
    assert result.out.strip()  # the translation
    bad = mt_cli("attention", tiny_run / "best.pt", "--src", "Ein Hund.", "--layer", "9")
    assert bad.rc == 2 and bad.err.startswith("mt: error: --layer 9")

    curves = tmp_path / "curves.png"
    result = mt_cli("plot", tiny_run, "-o", curves)
    assert result.rc == 0, result.err
    assert curves.read_bytes().startswith(PNG)
    assert result.err.strip().splitlines()[-1] == f"wrote {curves}"
    missing = mt_cli("plot", tmp_path / "nowhere", "-o", curves)
    assert missing.rc == 2 and "metrics.jsonl" in missing.err


def test_curves_plot_the_logged_series(tiny_run):
    records = read_metrics(tiny_run / "metrics.jsonl")
    fig = curves_figure(records, "t")
    loss_line = fig.axes[0].lines[0]
    logged = [(r["step"], r["loss"]) for r in records if "loss" in r]
    assert list(loss_line.get_xdata()) == [s for s, _ in logged]
    assert list(loss_line.get_ydata()) == pytest.approx([v for _, v in logged])
    bleu = [r["dev_bleu"] for r in records if "dev_bleu" in r]
    assert list(fig.axes[1].lines[0].get_ydata()) == pytest.approx(bleu)


def test_panels_grow_with_the_sentence_so_labels_stay_legible():
    def view(n_rows: int, n_cols: int) -> AttentionView:
        weights = torch.rand(2, n_rows, n_cols).softmax(-1)
        rows, cols = [f"t{i}" for i in range(n_rows)], [f"s{i}" for i in range(n_cols)]
        return AttentionView("encoder-decoder attention", weights, rows, cols)

    short = attention_figure([view(5, 6)], "t", head=None).get_size_inches()
    long = attention_figure([view(30, 40)], "t", head=None).get_size_inches()
    assert tuple(short) == pytest.approx((4.6, 3.4))  # the minimum panel
    height_in, width_in = long[1] / 30, (long[0] - 1) / 40
    assert height_in >= 0.2 and width_in >= 0.2  # at least 0.2 inch per token each way
