"""Train a peer, HF transformers' MarianMT, with an mt run's data, tokenizer and budget.

A BLEU score means little without a reference point. This script trains `MarianMTModel` from
scratch on exactly what an mt run trained on (the same sentencepiece model, the same filtered
corpus, the same token-budget batches in the same order, the same optimizer, LR schedule, label
smoothing, seed and thread count) for the same wall-clock minutes on the same machine, then
translates the test split and scores it with mt's metrics. What differs is the peer's own
code: its layers, initialisation (normal, std 0.02), attention kernels and `generate` search
(HF's length penalty score / len**lp rather than mt's GNMT alpha, one length limit per batch).

    pip install -e '.[peer]'
    python -m scripts.bench.peer_marian --run-dir runs/multi30k --minutes 60 --threads 16

The run directory must hold `spm.model` (or `spm.src.model` + `spm.tgt.model`) and the
resolved `config.yaml` that `mt train` wrote. Outputs, all inside it unless told otherwise:
`peer_marian.json` (the summary, also printed as one JSON line), `peer_marian_metrics.jsonl`
(loss every `--log-every` steps, keys as in mt's metrics.jsonl), `peer_marian.pt` (weights and
Marian config) and `peer_marian.test.beam{K}.txt` (test translations).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from mt.batching import Batch, pad, token_batches
from mt.config import Config, DecodeConfig
from mt.config_file import load_config
from mt.data.corpus import read_parallel
from mt.data.loader import TrainingSet
from mt.data.prepare import prepare
from mt.device import autocast, resolve_device, resolve_precision
from mt.errors import MtError
from mt.export import generation_config, marian_config
from mt.metrics import score
from mt.tokenizer import EOS, PAD, Tokenizer
from mt.train.loss import label_smoothed_loss
from mt.train.schedule import learning_rate
from scripts.common import machine, write_text


def logits(model: torch.nn.Module, b: Batch) -> torch.Tensor:
    """Teacher-forced logits (B, T, V): the decoder reads mt's `tgt_in` (BOS + target).

    No decoder mask is needed: targets are right-padded, so under the causal mask a real
    position never sees a pad, and pad positions are ignored by the loss.
    """
    out = model(
        input_ids=b.src,
        attention_mask=b.src.ne(PAD),
        decoder_input_ids=b.tgt_in,
        use_cache=False,
    )
    return out.logits


def save_weights(model: torch.nn.Module, step: int, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(
        {"marian_config": model.config.to_dict(), "model": model.state_dict(), "step": step}, tmp
    )
    os.replace(tmp, path)


def train(
    model: torch.nn.Module,
    cfg: Config,
    data: TrainingSet,
    device: torch.device,
    precision: str,
    args: argparse.Namespace,
    log_path: Path,
    save_path: Path,
) -> dict[str, Any]:
    """mt's training loop (batches, accumulation, loss, schedule, clipping) around Marian.

    The clock starts before the first batch is collated and counts everything after it,
    periodic saves included; training stops at the first step that ends past the budget.
    """
    t = cfg.train
    params = [p for p in model.parameters() if p.requires_grad]  # not the sinusoid tables
    optimizer = torch.optim.Adam(
        params,
        lr=learning_rate(1, t, cfg.model),
        betas=(t.optimizer_betas[0], t.optimizer_betas[1]),
        eps=t.optimizer_eps,
        weight_decay=t.weight_decay,
    )
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    budget = 60.0 * args.minutes
    log_path.write_text("", encoding="utf-8")

    model.train()
    step = epoch = pos = n_batches = 0
    total_tok = 0
    window_loss = torch.zeros((), device=device)
    window_nll = torch.zeros((), device=device)
    window_tok = 0
    last_loss = float("nan")
    reason = None
    bar = tqdm(total=args.max_steps or None, unit="step", dynamic_ncols=True, disable=None)
    start = window_start = time.perf_counter()
    while reason is None:
        batches = data.epoch_batches(t.max_tokens, t.seed, epoch)
        n_batches, pos = len(batches), 0
        while pos < n_batches and reason is None:
            chosen = batches[pos : pos + t.accum_steps]
            group = [data[idx] for idx in chosen]
            lr = learning_rate(step + 1, t, cfg.model)
            for g in optimizer.param_groups:
                g["lr"] = lr
            ntok = sum(b.tgt_tokens for b in group)
            for b in group:
                b = b.to(device)
                with autocast(device, precision):
                    out = logits(model, b)
                loss, nll = label_smoothed_loss(out, b.tgt_out, t.label_smoothing, PAD)
                scaler.scale(loss / ntok).backward()
                window_loss += loss.detach()
                window_nll += nll.detach()
            scaler.unscale_(optimizer)
            if t.clip_norm:
                torch.nn.utils.clip_grad_norm_(params, t.clip_norm)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            pos += len(chosen)
            window_tok += ntok
            total_tok += ntok
            bar.update(1)
            if step % args.log_every == 0:
                now = time.perf_counter()
                last_loss = float(window_loss) / window_tok
                rec = {
                    "step": step,
                    "epoch": epoch,
                    "loss": last_loss,
                    "nll": float(window_nll) / window_tok,
                    "lr": lr,
                    "tgt_tokens_per_s": window_tok / (now - window_start),
                    "elapsed": round(now - start, 1),
                }
                with log_path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(rec) + "\n")
                bar.set_postfix(
                    loss=f"{rec['loss']:.3f}",
                    tok_s=f"{rec['tgt_tokens_per_s']:.0f}",
                    min=f"{(now - start) / 60:.1f}/{args.minutes:g}",
                )
                window_loss.zero_()
                window_nll.zero_()
                window_tok = 0
                window_start = now
            if args.save_every and step % args.save_every == 0:
                save_weights(model, step, save_path)
            if args.max_steps and step >= args.max_steps:
                reason = "max_steps"
            elif budget and time.perf_counter() - start >= budget:
                reason = "minutes"
        if pos >= n_batches:
            epoch, pos = epoch + 1, 0
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    bar.close()
    if window_tok:
        last_loss = float(window_loss) / window_tok
    return {
        "steps": step,
        "epochs": round(epoch + pos / max(n_batches, 1), 3),
        "stopped": reason,
        "train_minutes": round(seconds / 60, 3),
        "tgt_tokens": total_tok,
        "tgt_tokens_per_s": round(total_tok / seconds, 1),
        "last_loss": round(last_loss, 4),
    }


@torch.inference_mode()
def translate(
    model: Any,
    tok: Tokenizer,
    lines: list[str],
    beam: int,
    dcfg: DecodeConfig,
    max_positions: int,
    length_penalty: float,
    device: torch.device,
) -> list[str]:
    """`generate` over length-sorted batches of `dcfg.max_tokens` source tokens, input order out.

    mt limits each output to floor(a * src_len + b) tokens before EOS; `generate` counts EOS in
    `max_new_tokens` and has one limit per batch, so the batch's longest source sets it (+1 for
    EOS). Like mt's search, PAD and BOS are never produced and EOS is forced at the limit.
    """
    model.eval()
    gen = generation_config(beam, length_penalty=length_penalty)
    ids = tok.encode_src([line.strip() for line in lines])
    ids = [x if len(x) <= max_positions else x[: max_positions - 1] + [EOS] for x in ids]
    todo = [i for i, line in enumerate(lines) if line.strip()]
    out = [""] * len(lines)
    for batch in token_batches([len(ids[i]) for i in todo], dcfg.max_tokens):
        rows = [todo[j] for j in batch]
        src = pad([ids[r] for r in rows]).to(device)
        longest = max(len(ids[r]) for r in rows)
        limit = min(int(dcfg.max_len_a * longest + dcfg.max_len_b) + 1, max_positions - 1)
        gen.max_new_tokens = limit
        seqs = model.generate(input_ids=src, attention_mask=src.ne(PAD), generation_config=gen)
        for r, seq in zip(rows, seqs.tolist()):
            seq = seq[1:]  # the decoder start token
            if EOS in seq:
                seq = seq[: seq.index(EOS)]
            out[r] = tok.decode_tgt(seq)
    return out


def evaluate(
    model: Any,
    tok: Tokenizer,
    cfg: Config,
    beam: int,
    length_penalty: float,
    device: torch.device,
    hyp_path: Path,
) -> dict[str, Any]:
    src, refs = read_parallel(cfg.data, cfg.data.test)
    tick = time.perf_counter()
    hyps = translate(
        model, tok, src, beam, cfg.decode, cfg.model.max_positions, length_penalty, device
    )
    seconds = time.perf_counter() - tick
    write_text(hyp_path, "".join(h + "\n" for h in hyps), "translations")
    s = score(hyps, refs)
    return {
        "beam": beam,
        "bleu": round(s.bleu, 2),
        "bleu_lc": round(s.bleu_lc, 2),
        "chrf": round(s.chrf, 2),
        "ter": round(s.ter, 2),
        "sentences": s.sentences,
        "decode_seconds": round(seconds, 1),
        "bleu_signature": s.bleu_signature,
        "chrf_signature": s.chrf_signature,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", type=Path, required=True, help="an mt run (spm.model, config.yaml)")
    p.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="training wall-clock budget (default: the run's train.max_minutes)",
    )
    p.add_argument("--max-steps", type=int, default=0, help="also stop after N steps (smoke runs)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: train.threads)")
    p.add_argument("--beam", type=int, default=5, help="beam size for the test set")
    p.add_argument("--greedy", action="store_true", help="also score greedy search")
    p.add_argument(
        "--length-penalty",
        type=float,
        default=1.0,
        help="generate's length_penalty (score / len**lp; HF's default 1.0)",
    )
    p.add_argument(
        "--log-every", type=int, default=None, help="steps per log line (train.log_every)"
    )
    p.add_argument("--save-every", type=int, default=0, help="save weights every N steps; 0 = end")
    p.add_argument(
        "--out", type=Path, default=None, help="summary JSON (<run-dir>/peer_marian.json)"
    )
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> dict[str, Any]:
    import transformers
    from transformers import MarianMTModel

    run_dir: Path = args.run_dir
    cfg = load_config(run_dir / "config.yaml")
    tok = Tokenizer.load(run_dir)
    if tok is None:
        raise MtError(f"{run_dir}: no spm.model (or spm.src.model + spm.tgt.model)")
    t = cfg.train
    args.minutes = t.max_minutes if args.minutes is None else args.minutes
    args.log_every = args.log_every or t.log_every
    threads = t.threads if args.threads is None else args.threads
    if args.minutes < 0 or args.max_steps < 0 or args.save_every < 0 or args.log_every < 1:
        raise MtError("--minutes, --max-steps and --save-every must be >= 0, --log-every >= 1")
    if not args.minutes and not args.max_steps:
        raise MtError("give --minutes (the run's train.max_minutes is 0) or --max-steps")
    if args.beam < 1:
        raise MtError(f"--beam must be >= 1, got {args.beam}")
    if threads:
        torch.set_num_threads(threads)
    device = resolve_device(t.device, "train.device")
    precision = resolve_precision(t.precision, device).name
    torch.manual_seed(t.seed)
    random.seed(t.seed)

    prepared = prepare(cfg.data, cfg.tokenizer, cfg.train.seed, run_dir)
    corpus = TrainingSet(prepared.train, prepared.weights)
    mcfg = marian_config(cfg, tok)
    model = MarianMTModel(mcfg).to(device)
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    tqdm.write(
        f"peer_marian: MarianMTModel {n_params / 1e6:.1f}M parameters, {len(corpus)} training "
        f"pairs, device {device}, precision {precision}, {torch.get_num_threads()} threads, "
        f"budget {args.minutes:g} min" + (f" / {args.max_steps} steps" if args.max_steps else "")
    )
    if cfg.model.norm != "post":
        tqdm.write(
            f"peer_marian: warning: Marian is post-norm, the mt run is {cfg.model.norm}-norm"
        )

    save_path = run_dir / "peer_marian.pt"
    stats = train(
        model,
        cfg,
        corpus,
        device,
        precision,
        args,
        run_dir / "peer_marian_metrics.jsonl",
        save_path,
    )
    save_weights(model, stats["steps"], save_path)

    beam = evaluate(
        model,
        tok,
        cfg,
        args.beam,
        args.length_penalty,
        device,
        run_dir / f"peer_marian.test.beam{args.beam}.txt",
    )
    summary: dict[str, Any] = {
        "peer": "transformers.MarianMTModel",
        "run_dir": str(run_dir),
        "params": n_params,
        **stats,
        "budget_minutes": args.minutes,
        "max_steps": args.max_steps,
        "test": cfg.data.test,
        **{k: v for k, v in beam.items() if k != "beam"},
        "beam": args.beam,
        "length_penalty": args.length_penalty,
        "max_len": f"{cfg.decode.max_len_a}*max_src_len+{cfg.decode.max_len_b} per batch",
        "device": str(device),
        "precision": precision,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "machine": machine(),
    }
    if args.greedy:
        greedy = evaluate(
            model, tok, cfg, 1, args.length_penalty, device, run_dir / "peer_marian.test.greedy.txt"
        )
        summary["greedy"] = {k: greedy[k] for k in ("bleu", "bleu_lc", "chrf", "decode_seconds")}
    out = args.out or run_dir / "peer_marian.json"
    write_text(out, json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        summary = run(args)
    except MtError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
