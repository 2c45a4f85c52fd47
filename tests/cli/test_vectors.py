"""`mt vectors`: the vectors drawn are the model's own, and the keys' pushes add up."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from support.inprocess import run_in_process

from mt.checkpoint import load_model
from mt.config import ModelConfig
from mt.model import Transformer
from mt.views.vectors import encoder_trace, find_word, pca_2d, word_vectors

SENTENCES = [
    "Ein Mann sitzt auf einer Bank im Park.",
    "Eine Frau steht vor einer Bank, die geschlossen ist.",
    "Zwei Hunde spielen im Schnee.",
]


@pytest.fixture(scope="module")
def loaded(tiny_run):
    return load_model(tiny_run / "best.pt")


def hooked_states(model: Transformer, src: torch.Tensor) -> list[torch.Tensor]:
    """Embedding + position (recomputed from the weights) and each encoder layer's output
    (read by forward hooks), independently of mt.views.vectors."""
    d = model.cfg.d_model
    pos = torch.arange(src.size(1), dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float32) / d)
    pe = torch.stack([torch.sin(pos * freq), torch.cos(pos * freq)], dim=-1).flatten(1)
    states = [model.src_embed.weight[src[0]].detach() * math.sqrt(d) + pe]
    handles = [
        layer.register_forward_hook(lambda m, args, out: states.append(out[0][0]))
        for layer in model.encoder
    ]
    with torch.no_grad():
        model.encode(src)
    for h in handles:
        h.remove()
    return states


def test_vectors_are_the_models_hidden_states(loaded):
    found = word_vectors(loaded.model, loaded.tokenizer, SENTENCES, "Bank")
    assert [o.sentence for o in found.occurrences] == SENTENCES[:2]
    assert found.depths == ["embedding", "layer 1", "layer 2"]
    for occ in found.occurrences:
        src = torch.tensor(loaded.tokenizer.encode_src([occ.sentence]))
        states = hooked_states(loaded.model, src)
        pieces = list(range(occ.position, occ.position + len(occ.tokens)))
        expected = torch.stack([s[pieces].mean(0) for s in states]).double().numpy()
        np.testing.assert_allclose(occ.vectors, expected, atol=1e-5, rtol=0)
        assert "".join(occ.tokens).replace("\u2581", "") == "Bank"


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_key_contributions_and_residual_sum_to_the_sublayer_output(norm):
    """x_i + b + sum_j c_ij is what the model normalises after attention (post-norm: the input
    of norm1; pre-norm: the input of norm2), captured here by hooks on those norms."""
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, n_heads=4, d_ff=64, encoder_layers=2, decoder_layers=1, norm=norm)
    model = Transformer(cfg, 50, 50).eval()
    src = torch.randint(4, 50, (1, 9))
    src[0, -2:] = 0  # two pad keys: masked, so they must push nothing
    sums = []
    handles = [
        (layer.norm2 if norm == "pre" else layer.norm1).register_forward_pre_hook(
            lambda m, args: sums.append(args[0][0])
        )
        for layer in model.encoder
    ]
    trace = encoder_trace(model, src)
    for h in handles:
        h.remove()
    assert len(trace) == len(sums) == 2
    for t, captured in zip(trace, sums):
        assert t.contributions.shape == (9, 9, 32)
        torch.testing.assert_close(t.residual + t.contributions.sum(1), captured, atol=1e-5, rtol=0)
        assert t.weights.shape == (4, 9, 9)
        assert t.contributions[:, -2:].abs().max() == 0
        assert t.contributions[:, :-2].abs().max() > 0


def test_trained_model_contributions_sum_too(loaded):
    model = loaded.model
    src = torch.tensor(loaded.tokenizer.encode_src([SENTENCES[0]]))
    sums = []
    handles = [
        layer.norm1.register_forward_pre_hook(lambda m, args: sums.append(args[0][0]))
        for layer in model.encoder
    ]
    trace = encoder_trace(model, src)
    for h in handles:
        h.remove()
    for t, captured in zip(trace, sums):
        torch.testing.assert_close(t.residual + t.contributions.sum(1), captured, atol=1e-5, rtol=0)


def test_pushes_are_ranked_along_the_move(loaded):
    found = word_vectors(loaded.model, loaded.tokenizer, SENTENCES, "Bank")
    occ = found.occurrences[0]
    src = torch.tensor(loaded.tokenizer.encode_src([occ.sentence]))
    trace = encoder_trace(loaded.model, src)
    pieces = list(range(occ.position, occ.position + len(occ.tokens)))
    tokens = loaded.tokenizer.src_pieces(occ.sentence)
    for t, pushed in zip(trace, occ.pushed_by):
        move = (t.output[pieces] - t.input[pieces]).mean(0).double()
        along = (t.contributions[pieces].mean(0).double() @ move / move.norm()).tolist()
        ranked = sorted(range(len(along)), key=lambda j: -along[j])[: len(pushed)]
        assert [p.position for p in pushed] == ranked
        assert [p.token for p in pushed] == [tokens[j] for j in ranked]
        assert [p.along for p in pushed] == pytest.approx([along[j] for j in ranked], abs=1e-5)


def test_pca_is_shared_and_reproducible(loaded):
    a = word_vectors(loaded.model, loaded.tokenizer, SENTENCES, "Bank")
    b = word_vectors(loaded.model, loaded.tokenizer, SENTENCES, "Bank")
    for x, y in zip(a.occurrences, b.occurrences):
        assert np.array_equal(x.xy, y.xy)
    points = np.concatenate([o.vectors for o in a.occurrences])
    mean, comps, explained = pca_2d(points)
    np.testing.assert_allclose(comps @ comps.T, np.eye(2), atol=1e-10)
    for o in a.occurrences:
        np.testing.assert_allclose(o.xy, (o.vectors - mean) @ comps.T, atol=1e-9)
    # The first axis is the direction of largest variance: no unit vector does better.
    centred = points - mean
    rng = np.random.default_rng(0)
    for u in rng.normal(size=(20, points.shape[1])):
        u /= np.linalg.norm(u)
        assert ((centred @ u) ** 2).sum() <= ((centred @ comps[0]) ** 2).sum() + 1e-9
    assert 0 < explained[1] <= explained[0] <= 1

    # Centred: each depth's mean over the occurrences is removed, so each depth sits at 0.
    c = word_vectors(loaded.model, loaded.tokenizer, SENTENCES, "Bank", centre=True)
    np.testing.assert_allclose(np.mean([o.xy for o in c.occurrences], axis=0), 0, atol=1e-9)
    for x, y in zip(a.occurrences, c.occurrences):
        assert np.array_equal(x.vectors, y.vectors)  # the model's own either way


def test_whole_words_only(loaded):
    tok = loaded.tokenizer
    lines = ["Die Bank.", "Ein Bankett und Bänke.", "bank Bank,Bank"]
    found = [(m.sentence_index, m.context) for m in find_word(tok, lines, "Bank")]
    assert found == [(0, "Die Bank."), (2, "bank Bank,Bank"), (2, "bank Bank,Bank")]
    ms = find_word(tok, lines, "Bank")
    assert ms[1].pieces != ms[2].pieces  # the two occurrences in line 3 are different pieces


def test_several_words_are_followed_together(loaded):
    """One word in several languages (`--word` repeated): each whole-word occurrence of any."""
    tok = loaded.tokenizer
    lines = ["Ein Hund läuft.", "Un chien court.", "A dog runs.", "Ein Hundefutter."]
    found = find_word(tok, lines, ["Hund", "chien", "dog"])
    assert [m.sentence_index for m in found] == [0, 1, 2]  # "Hundefutter" is another word
    res = word_vectors(loaded.model, tok, lines, ["Hund", "chien", "dog"])
    assert res.word == "Hund / chien / dog" and len(res.occurrences) == 3
    alone = word_vectors(loaded.model, tok, lines[:1], "Hund").occurrences[0].vectors
    np.testing.assert_allclose(res.occurrences[0].vectors, alone, rtol=1e-5, atol=1e-5)


def test_json_output_holds_every_number(tiny_run, mt_cli, tmp_path, capsys, monkeypatch):
    args = ("vectors", tiny_run / "best.pt", "--word", "Bank", "--src", SENTENCES[0])
    first = mt_cli(*args, "--src", SENTENCES[1], "--json")
    second = mt_cli(*args, "--src", SENTENCES[1], "--json")
    assert first.rc == 0, first.err
    data = json.loads(first.out)
    assert data == json.loads(second.out)  # the same picture in two processes
    assert data["word"] == "Bank" and data["depths"] == ["embedding", "layer 1", "layer 2"]
    assert len(data["occurrences"]) == 2
    for occ in data["occurrences"]:
        assert len(occ["vectors"]) == 3 and len(occ["vectors"][0]) == 64
        assert len(occ["xy"]) == 3 and all(len(p) == 2 for p in occ["xy"])
        assert [p["depth"] for p in occ["pushed_by"]] == ["layer 1", "layer 2"]
    if "averaged" in first.err:
        assert len(data["occurrences"][0]["tokens"]) > 1

    png = tmp_path / "v.png"
    page = tmp_path / "v.html"
    rc, _, err = run_in_process([*args, "-o", png, "--html", page], capsys, monkeypatch)
    assert rc == 0, err
    assert f"wrote {png}\n" in err and f"wrote {page}\n" in err  # as mt plot says
    assert png.read_bytes().startswith(b"\x89PNG") and "MtViewer" in page.read_text()


def test_bad_inputs_are_one_line(tiny_run, mt_cli, tmp_path, capsys, monkeypatch):
    ckpt = tiny_run / "best.pt"
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    long = " ".join(["Hund"] * 1100)
    cases = [
        (("--input", empty, "--word", "Bank"), "no sentences"),
        (("--input", tmp_path / "missing.txt", "--word", "Bank"), "not found"),
        (("--src", long, "--word", "Hund"), "the model has positions for 1024"),
        (("--word", "Bank"), "give sentences"),
    ]
    for args, message in cases:
        rc, _, err = run_in_process(["vectors", ckpt, *args], capsys, monkeypatch)
        assert rc == 2, (args, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("mt: error:") and message in lines[0]
    # One through a real process: the exit code and stderr a shell sees.
    result = mt_cli("vectors", ckpt, "--src", SENTENCES[2], "--word", "Bank")
    assert result.rc == 2 and "Traceback" not in result.err
    assert result.err.strip() == ("mt: error: 'Bank' is not a whole word of any of the 1 sentences")
