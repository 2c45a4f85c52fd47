"""Ensembles: the averaged distribution, search over it, and `mt translate A.pt B.pt`."""

from __future__ import annotations

import gzip
import json

import pytest
import torch
from support.copier import make_model, sources
from support.tasks import write_five_sentence_task

from mt.config import DecodeConfig, ModelConfig
from mt.model import Transformer
from mt.search.beam import beam_search, greedy_search
from mt.search.ensemble import Ensemble
from mt.tokenizer import BOS


def test_an_ensemble_of_one_model_twice_is_that_model():
    model = make_model(3)
    pair = Ensemble([model, model]).eval()
    _, src = sources(8, seed=31)
    cfg = DecodeConfig(beam=4, alpha=0.6, max_len_a=1.5, max_len_b=4, nbest=2)
    assert [h.tokens for h in greedy_search(pair, src, cfg)] == [
        h.tokens for h in greedy_search(model, src, cfg)
    ]
    for a, b in zip(beam_search(pair, src, cfg), beam_search(model, src, cfg)):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)


def test_the_step_distribution_is_the_normalised_mean_of_log_probabilities():
    wide = make_model(4)
    torch.manual_seed(5)  # a member of another width and depth, same vocabulary
    cfg = ModelConfig(d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=3,
                      dropout=0.0, max_positions=48)  # fmt: skip
    narrow = Transformer(cfg, 16, 16).eval()
    ens = Ensemble([wide, narrow]).eval()
    assert ens.cfg.max_positions == 48
    _, src = sources(5, seed=32)
    prev = torch.full((5,), BOS)
    with torch.no_grad():
        memories, mask, _ = ens.encode(src)
        state = ens.start_state(memories, mask)
        got = torch.log_softmax(ens.project(ens.step_hidden(prev, state)[0]), -1)
        want = []
        for m in (wide, narrow):
            memory, mask, _ = m.encode(src)
            logits, _ = m.step(prev, m.start_state(memory, mask))
            want.append(torch.log_softmax(logits, -1))
        mean = (want[0] + want[1]) / 2
    assert torch.allclose(got, torch.log_softmax(mean, -1), atol=1e-5)
    assert not torch.allclose(got, want[0], atol=1e-3)  # both members count
    hyps = beam_search(ens, src, DecodeConfig(beam=3, alpha=0.6, max_len_a=1.5, max_len_b=4))
    assert len(hyps) == 5 and all(len(h) == 1 for h in hyps)


def test_mt_translate_with_two_checkpoints(tiny_run, mt_cli, multi30k_dir):
    with gzip.open(multi30k_dir / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        lines = [next(f).strip() for _ in range(12)]
    early = sorted(tiny_run.glob("checkpoint_*.pt"))[0]
    stdin = "\n".join(lines) + "\n"
    both = mt_cli("translate", tiny_run / "last.pt", early, "--device", "cpu", stdin=stdin)
    assert both.rc == 0, both.err
    assert len(both.out.splitlines()) == 12
    alone = mt_cli("translate", tiny_run / "last.pt", "--device", "cpu", stdin=stdin)
    assert both.out != alone.out  # the second member changes some outputs
    twice = mt_cli("translate", tiny_run / "last.pt", tiny_run / "last.pt", "--device", "cpu",
                   stdin=stdin)  # fmt: skip
    assert twice.out == alone.out


@pytest.mark.slow
def test_mt_eval_scores_an_ensemble_as_translate_outputs_it(
    tiny_run, mt_cli, multi30k_dir, tmp_path
):
    src, ref = tmp_path / "src.de", tmp_path / "ref.en"
    for name, path in (("de", src), ("en", ref)):
        with gzip.open(multi30k_dir / f"test_2016_flickr.{name}.gz", "rt", encoding="utf-8") as f:
            path.write_text("".join(next(f) for _ in range(12)), encoding="utf-8")
    members = [tiny_run / "last.pt", sorted(tiny_run.glob("checkpoint_*.pt"))[0]]
    out = mt_cli("translate", *members, "--device", "cpu", "-i", src, "-o", tmp_path / "hyp")
    assert out.rc == 0, out.err
    by_hyp = mt_cli("eval", "--hyp", tmp_path / "hyp", "--src", src, "--ref", ref, "--json")
    direct = mt_cli("eval", *members, "--src", src, "--ref", ref, "--device", "cpu", "--json")
    alone = mt_cli("eval", members[0], "--src", src, "--ref", ref, "--device", "cpu", "--json")
    assert direct.rc == 0, direct.err
    assert json.loads(direct.out) == json.loads(by_hyp.out)
    assert json.loads(direct.out) != json.loads(alone.out)  # the second member counts


def test_members_with_other_tokenizers_are_one_error_line(tiny_run, mt_cli, tmp_path):
    config = write_five_sentence_task(tmp_path)  # a five-sentence task: its own small vocabulary
    assert mt_cli("train", config, "--run-dir", tmp_path / "run").rc == 0
    other = tmp_path / "run" / "last.pt"
    result = mt_cli("translate", tiny_run / "last.pt", other, "--device", "cpu", stdin="Hund\n")
    assert result.rc == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and str(other) in lines[0] and "tokenizer" in lines[0]
