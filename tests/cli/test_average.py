"""`mt average`: the mean of the weights, as fairseq's and OpenNMT's averaging does."""

from __future__ import annotations

import torch


def test_average_is_the_mean_and_translates(tiny_run, mt_cli, tmp_path):
    ckpts = sorted(tiny_run.glob("checkpoint_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    assert len(ckpts) == 2
    out = tmp_path / "avg.pt"
    result = mt_cli("average", *ckpts, "-o", out)
    assert result.rc == 0, result.err
    a, b = (torch.load(p, weights_only=True)["model"] for p in ckpts)
    avg = torch.load(out, weights_only=True)
    assert avg["format"] == "mt-checkpoint" and avg["averaged_from"] == [str(p) for p in ckpts]
    for name, tensor in avg["model"].items():
        torch.testing.assert_close(tensor, (a[name] + b[name]) / 2, msg=name)
    translated = mt_cli("translate", out, "--greedy", stdin="Ein Hund rennt.\n")
    assert translated.rc == 0, translated.err
    assert len(translated.out.splitlines()) == 1


def test_average_refuses_checkpoints_of_different_models(tiny_run, mt_cli, tmp_path):
    data = torch.load(tiny_run / "best.pt", weights_only=True)
    data["model"] = {k: v[:1] if v.dim() else v for k, v in data["model"].items()}
    other = tmp_path / "other.pt"
    torch.save(data, other)
    result = mt_cli("average", tiny_run / "best.pt", other, "-o", tmp_path / "x.pt")
    assert result.rc == 2
    assert result.err.startswith("mt: error:") and "differs in shape" in result.err
    assert not (tmp_path / "x.pt").exists()
