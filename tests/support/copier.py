"""A tiny Transformer over 16 ids and the copy task the search tests use: random sentences of
ordinary ids, a model untrained or trained for a few seconds to copy its input (so that the
searches have real choices), and the teacher-forced score a search maximises, to check a
search's result against."""

from __future__ import annotations

import torch

from mt.batching import pad
from mt.config import ModelConfig
from mt.model import Transformer
from mt.tokenizer import BOS, EOS, PAD
from mt.train.loss import label_smoothed_loss

V = 16
FIRST = EOS + 1  # first ordinary token id


def make_model(seed: int = 0, norm: str = "post", layers: int = 2) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(
        d_model=32,
        n_heads=2,
        d_ff=64,
        encoder_layers=layers,
        decoder_layers=layers,
        dropout=0.0,
        norm=norm,
        max_positions=64,
    )
    return Transformer(cfg, V, V).eval()


def random_sentences(n: int, seed: int, lo: int = 2, hi: int = 7) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(lo, hi, (n,), generator=g).tolist()
    return [torch.randint(FIRST, V, (k,), generator=g).tolist() for k in lengths]


def train_copier() -> Transformer:
    """A model trained for a few seconds to copy its input, so searches have real choices."""
    model = make_model(1, norm="pre", layers=1)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3, betas=(0.9, 0.98))
    for step in range(140):
        sents = random_sentences(32, seed=1000 + step)
        src = pad([s + [EOS] for s in sents])
        tgt_in = pad([[BOS] + s for s in sents])
        tgt_out = pad([s + [EOS] for s in sents])
        loss, _ = label_smoothed_loss(model(src, tgt_in), tgt_out, 0.0, PAD)
        opt.zero_grad()
        (loss / tgt_out.ne(PAD).sum()).backward()
        opt.step()
    return model.eval()


def sources(n: int = 8, seed: int = 7) -> tuple[list[list[int]], torch.Tensor]:
    sents = random_sentences(n, seed)
    return sents, pad([s + [EOS] for s in sents])


def sequence_logp(model: Transformer, src_row: torch.Tensor, tokens: list[int]) -> float:
    """Teacher-forced log-probability of `tokens` + EOS, the quantity search maximises."""
    src = src_row[None, : int(src_row.ne(PAD).sum())]
    tgt_in = torch.tensor([[BOS] + tokens])
    with torch.no_grad():
        logp = model(src, tgt_in).log_softmax(-1)[0]
    target = torch.tensor(tokens + [EOS])
    return float(logp.gather(1, target[:, None]).sum())
