"""Export a checkpoint to other inference engines: CTranslate2, and HF transformers' Marian.

Both compute the same function as the mt model: they let engines people already run serve mt
models, and they are the peers of `scripts/bench/decode.py`'s speed comparison. They need the
`[export]` extra (`pip install 'mt[export]'`); without it `mt export` says so in one line.

`--to ctranslate2` writes a CTranslate2 Transformer through its spec API (mt's weights map onto
the spec directly, so no converter of CTranslate2's is involved), with mt's sinusoid table,
the source EOS added by the model (`add_source_eos`), the vocabulary, and the sentencepiece
model(s) `spm.model` (or `spm.src.model` + `spm.tgt.model`). What loads: everything a user
needs to translate::

    sp = sentencepiece.SentencePieceProcessor(model_file="OUT_DIR/spm.model")
    translator = ctranslate2.Translator("OUT_DIR")
    result = translator.translate_batch([sp.encode("Ein Hund.", out_type=str)], beam_size=5)
    print(sp.decode(result[0].hypotheses[0]))

What differs from `mt translate`: CTranslate2's length penalty is not mt's GNMT `decode.alpha`,
its beam search ends a sentence when its best candidate ends (mt's `--stop-early`), and
`max_decoding_length` is one limit per batch where mt has one per sentence.

`--to marian` writes a `MarianMTModel` directory (`save_pretrained`: config, weights and a
generation config with mt's token ids: decoder start BOS, PAD and BOS never generated). The
model dimensions are permuted so that mt's interleaved sin/cos positions land where Marian puts
its concatenated ones, which leaves the function unchanged. It also holds `source.spm`,
`target.spm` and `vocab.json` (`target_vocab.json` when the vocabularies are separate), so
`MarianTokenizer.from_pretrained(OUT_DIR)` loads. What does not match mt: `MarianTokenizer`
applies Moses punctuation normalisation when `sacremoses` is installed (mt does not), `generate`
scores with HF's length penalty (score / len ** lp, not GNMT's), and its `max_new_tokens` is
one limit per batch. Marian is post-norm only, so a pre-norm model exports to CTranslate2 only;
neither runs an SSRU decoder (`model.decoder_self: ssru`), which only mt decodes.

A multilingual model exports with its language tokens where each engine can be asked for them,
and `languages.json` saying how, with mt's target-language guard as banned tokens
(mt/export_tokens.py).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from mt.checkpoint import Loaded
from mt.config import Config
from mt.errors import MtError
from mt.export_tokens import how_to_ask, language_card, marian_piece_names, write_card
from mt.shortlist import write_vmap
from mt.tokenizer import BOS, EOS, PAD, UNK, Tokenizer

TARGETS = ("ctranslate2", "marian")
NEEDS = {"ctranslate2": "ctranslate2", "marian": "transformers"}


def require(module: str, target: str) -> None:
    """Import `module` or fail in one line naming the extra that provides it."""
    try:
        __import__(module)
    except ImportError:
        raise MtError(f"mt export --to {target} needs {module}: pip install 'mt[export]'") from None


# -- HF transformers: MarianMTModel ----------------------------------------------------------------


def permutation(d: int) -> torch.Tensor:
    """Marian dim j <- mt dim P[j]: sines (mt's even dims) first, then cosines (odd dims)."""
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def marian_config(cfg: Config, tok: Tokenizer) -> Any:
    """A MarianConfig of the mt model's shape, with mt's token ids.

    Marian has one embedding table for both sides when `share_encoder_decoder_embeddings`, and
    ties the output projection to the decoder embedding when `tie_word_embeddings`, which are
    mt's `tie_embeddings` (one shared table + tied output, needs a joint vocabulary).
    """
    from transformers import MarianConfig

    m = cfg.model
    share = tok.joint and m.tie_embeddings
    return MarianConfig(
        vocab_size=tok.src_vocab_size,
        decoder_vocab_size=tok.tgt_vocab_size,
        share_encoder_decoder_embeddings=share,
        tie_word_embeddings=m.tie_embeddings,
        d_model=m.d_model,
        encoder_layers=m.encoder_layers,
        decoder_layers=m.decoder_layers,
        encoder_attention_heads=m.n_heads,
        decoder_attention_heads=m.n_heads,
        encoder_ffn_dim=m.d_ff,
        decoder_ffn_dim=m.d_ff,
        dropout=m.dropout,
        attention_dropout=m.attention_dropout,
        activation_dropout=m.activation_dropout,
        activation_function="relu",
        max_position_embeddings=m.max_positions,
        scale_embedding=True,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=BOS,
        decoder_start_token_id=BOS,
        forced_eos_token_id=EOS,
    )


def check_target(loaded: Loaded, target: str) -> None:
    """What `target` cannot run, in one line, before any folder is made."""
    m = loaded.cfg.model
    if m.decoder_self != "attention":
        raise MtError(f"--to {target}: it has no SSRU decoder layer (model.decoder_self: ssru)")
    if target == "marian" and m.norm != "post":
        raise MtError(
            "--to marian needs a post-norm model (model.norm: post); use --to ctranslate2"
        )
    if target == "marian" and not (m.tie_embeddings and loaded.tokenizer.joint):
        raise MtError(
            "--to marian needs tied embeddings and a joint vocabulary; use --to ctranslate2"
        )


def to_marian(loaded: Loaded) -> Any:
    """A MarianMTModel (eval mode) computing the same function as the mt model."""
    from transformers import MarianMTModel

    check_target(loaded, "marian")
    m = loaded.cfg.model
    d = m.d_model
    hf = MarianMTModel(marian_config(loaded.cfg, loaded.tokenizer)).eval()
    P = permutation(d)
    w = loaded.model.state_dict()
    sd = {"model.shared.weight": w["src_embed.weight"][:, P]}

    def lin(prefix: str, weight: torch.Tensor, bias: torch.Tensor, rows=None, cols=None) -> None:
        if cols is not None:
            weight = weight[:, cols]
        if rows is not None:
            weight, bias = weight[rows], bias[rows]
        sd[f"{prefix}.weight"], sd[f"{prefix}.bias"] = weight, bias

    def norm(prefix: str, src: str) -> None:
        sd[f"{prefix}.weight"], sd[f"{prefix}.bias"] = w[f"{src}.weight"][P], w[f"{src}.bias"][P]

    def self_attn(prefix: str, src: str) -> None:
        W, b = w[f"{src}.qkv.weight"], w[f"{src}.qkv.bias"]
        for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
            lin(f"{prefix}.{name}", W[i * d : (i + 1) * d], b[i * d : (i + 1) * d], cols=P)
        lin(f"{prefix}.out_proj", w[f"{src}.out.weight"], w[f"{src}.out.bias"], rows=P)

    def ffn(prefix: str, src: str) -> None:
        lin(f"{prefix}.fc1", w[f"{src}.fc1.weight"], w[f"{src}.fc1.bias"], cols=P)
        lin(f"{prefix}.fc2", w[f"{src}.fc2.weight"], w[f"{src}.fc2.bias"], rows=P)

    for i in range(m.encoder_layers):
        p, s = f"model.encoder.layers.{i}", f"encoder.{i}"
        self_attn(f"{p}.self_attn", f"{s}.attn")
        norm(f"{p}.self_attn_layer_norm", f"{s}.norm1")
        ffn(p, f"{s}.ffn")
        norm(f"{p}.final_layer_norm", f"{s}.norm2")
    for i in range(m.decoder_layers):
        p, s = f"model.decoder.layers.{i}", f"decoder.{i}"
        self_attn(f"{p}.self_attn", f"{s}.self_attn")
        norm(f"{p}.self_attn_layer_norm", f"{s}.norm1")
        c = f"{s}.cross_attn"
        lin(f"{p}.encoder_attn.q_proj", w[f"{c}.q.weight"], w[f"{c}.q.bias"], cols=P)
        kv, kvb = w[f"{c}.kv.weight"], w[f"{c}.kv.bias"]
        lin(f"{p}.encoder_attn.k_proj", kv[:d], kvb[:d], cols=P)
        lin(f"{p}.encoder_attn.v_proj", kv[d:], kvb[d:], cols=P)
        lin(f"{p}.encoder_attn.out_proj", w[f"{c}.out.weight"], w[f"{c}.out.bias"], rows=P)
        norm(f"{p}.encoder_attn_layer_norm", f"{s}.norm2")
        ffn(p, f"{s}.ffn")
        norm(f"{p}.final_layer_norm", f"{s}.norm3")
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    left = [
        k
        for k in missing
        if "embed_positions" not in k
        and "embed_tokens" not in k
        and k not in ("lm_head.weight", "final_logits_bias")
    ]
    if left or unexpected:  # a transformers whose Marian names its weights differently
        raise RuntimeError(f"Marian export: missing {left}, unexpected {unexpected}")
    hf.tie_weights()
    return hf


def generation_config(beam: int, max_length: int | None = None, length_penalty: float = 1.0) -> Any:
    """`generate` settings close to mt's search: mt's ids, `beam` beams, PAD/BOS never produced,
    EOS forced at the length limit. Shared by the export and the HF peer benchmark."""
    from transformers import GenerationConfig

    extra = {} if max_length is None else {"max_length": max_length}
    return GenerationConfig(
        num_beams=beam,
        do_sample=False,
        length_penalty=length_penalty,
        decoder_start_token_id=BOS,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        forced_eos_token_id=EOS,
        suppress_tokens=[PAD, BOS],
        **extra,
    )


def _save_marian_tokenizer(tok: Tokenizer, out_dir: Path) -> None:
    """The files `MarianTokenizer.from_pretrained` reads: the spm models and piece -> id maps."""
    (out_dir / "source.spm").write_bytes(tok.src_proto)
    (out_dir / "target.spm").write_bytes(tok.tgt_proto)
    names = marian_piece_names(tok)  # `>>fr<<` for a source-side language token
    vocab = {names.get(i) or tok.src.id_to_piece(i): i for i in range(tok.src_vocab_size)}
    (out_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    settings: dict[str, Any] = {"tokenizer_class": "MarianTokenizer", "separate_vocabs": False}
    if not tok.joint:
        target = {tok.tgt.id_to_piece(i): i for i in range(tok.tgt_vocab_size)}
        (out_dir / "target_vocab.json").write_text(
            json.dumps(target, ensure_ascii=False), encoding="utf-8"
        )
        settings["separate_vocabs"] = True
    (out_dir / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")


def write_marian(loaded: Loaded, out_dir: Path) -> None:
    """A `MarianMTModel.from_pretrained`-able folder with its tokenizer files."""
    from transformers.utils import logging

    hf = to_marian(loaded)
    hf.generation_config = generation_config(loaded.cfg.decode.beam, loaded.cfg.model.max_positions)
    langs = loaded.tokenizer.languages
    if langs is not None and langs.placement == "target":
        # No start of its own: `generate` without the language's decoder_start_token_id is an
        # error, as CTranslate2 refuses a line without its target_prefix.
        hf.generation_config.decoder_start_token_id = hf.generation_config.bos_token_id = None
    logging.disable_progress_bar()  # one shard of a small model: a bar is noise on stderr
    hf.save_pretrained(out_dir)
    _save_marian_tokenizer(loaded.tokenizer, out_dir)


# -- CTranslate2 -----------------------------------------------------------------------------------


def to_ctranslate2(loaded: Loaded, out_dir: Path, quantization: str | None) -> None:
    """Write a CTranslate2 model of the mt checkpoint into `out_dir` (via the spec API)."""
    from ctranslate2.specs import common_spec, transformer_spec

    m, tok = loaded.cfg.model, loaded.tokenizer
    w = {k: v.float().numpy() for k, v in loaded.model.state_dict().items()}
    w["positions"] = loaded.model.positions.cpu().numpy()
    spec = transformer_spec.TransformerSpec.from_config(
        (m.encoder_layers, m.decoder_layers),
        m.n_heads,
        pre_norm=m.norm == "pre",
        activation=getattr(common_spec.Activation, m.activation.upper()),
    )

    def lin(s, prefix: str) -> None:
        s.weight, s.bias = w[f"{prefix}.weight"], w[f"{prefix}.bias"]

    def ln(s, prefix: str) -> None:
        s.gamma, s.beta = w[f"{prefix}.weight"], w[f"{prefix}.bias"]

    for side, emb in ((spec.encoder, "src_embed"), (spec.decoder, "tgt_embed")):
        side.scale_embeddings = m.scale_embeddings
        side.position_encodings.encodings = w["positions"]
        table = side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings
        table.weight = w[f"{emb}.weight"]
        if m.norm == "pre":
            ln(side.layer_norm, "encoder_norm" if side is spec.encoder else "decoder_norm")
    for i, ls in enumerate(spec.encoder.layer):
        lin(ls.self_attention.linear[0], f"encoder.{i}.attn.qkv")
        lin(ls.self_attention.linear[1], f"encoder.{i}.attn.out")
        ln(ls.self_attention.layer_norm, f"encoder.{i}.norm1")
        lin(ls.ffn.linear_0, f"encoder.{i}.ffn.fc1")
        lin(ls.ffn.linear_1, f"encoder.{i}.ffn.fc2")
        ln(ls.ffn.layer_norm, f"encoder.{i}.norm2")
    for i, ls in enumerate(spec.decoder.layer):
        lin(ls.self_attention.linear[0], f"decoder.{i}.self_attn.qkv")
        lin(ls.self_attention.linear[1], f"decoder.{i}.self_attn.out")
        ln(ls.self_attention.layer_norm, f"decoder.{i}.norm1")
        lin(ls.attention.linear[0], f"decoder.{i}.cross_attn.q")
        lin(ls.attention.linear[1], f"decoder.{i}.cross_attn.kv")
        lin(ls.attention.linear[2], f"decoder.{i}.cross_attn.out")
        ln(ls.attention.layer_norm, f"decoder.{i}.norm2")
        lin(ls.ffn.linear_0, f"decoder.{i}.ffn.fc1")
        lin(ls.ffn.linear_1, f"decoder.{i}.ffn.fc2")
        ln(ls.ffn.layer_norm, f"decoder.{i}.norm3")
    spec.decoder.projection.weight = w["output.weight"]
    if "output_bias" in w:  # an imported Marian model's final_logits_bias
        spec.decoder.projection.bias = w["output_bias"]
    src_vocab = [tok.src.id_to_piece(i) for i in range(tok.src_vocab_size)]
    tgt_vocab = [tok.tgt.id_to_piece(i) for i in range(tok.tgt_vocab_size)]
    spec.register_source_vocabulary(src_vocab)
    spec.register_target_vocabulary(tgt_vocab)
    spec.config.bos_token, spec.config.eos_token = tgt_vocab[BOS], tgt_vocab[EOS]
    spec.config.unk_token, spec.config.decoder_start_token = tgt_vocab[UNK], tgt_vocab[BOS]
    langs = tok.languages
    if langs is not None and langs.placement == "target":
        # mt's decoder starts from the language token, not BOS: no start token of the model's
        # own, so the caller's target_prefix `<2fr>` is the decoder's first input.
        spec.config.decoder_start_token = None
    spec.config.add_source_eos = True  # mt's encoder sees `pieces </s>`; callers pass pieces
    spec.validate()
    try:
        spec.optimize(quantization=quantization)
    except ValueError as err:  # CTranslate2 names the types it knows
        raise MtError(f"--quantization {quantization}: {err}") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    spec.save(str(out_dir))


def write_ctranslate2(loaded: Loaded, out_dir: Path, quantization: str | None) -> None:
    """A CTranslate2 model folder with the sentencepiece model(s) to tokenize its input, and
    the checkpoint's lexical shortlist, where it has one, as the vocabulary map CTranslate2
    reads from `vmap.txt` (`translate_batch(..., use_vmap=True)`)."""
    check_target(loaded, "ctranslate2")
    to_ctranslate2(loaded, out_dir, quantization)
    loaded.tokenizer.save(out_dir)
    if "shortlist" in loaded.data:
        write_vmap(loaded, out_dir / "vmap.txt")


# -- the command -----------------------------------------------------------------------------------


def export(
    checkpoint: Path,
    target: str,
    out_dir: Path,
    quantization: str | None = None,
    force: bool = False,
) -> list[str]:
    """Export `checkpoint` for `target` into `out_dir`, all or nothing; for a multilingual
    model, the lines that tell a user how to ask the exported model for a language.

    Everything is written into a temporary folder beside `out_dir` and renamed into place, so an
    interrupted export never leaves a half-written model where a server would load it.
    """
    if target not in TARGETS:
        raise MtError(f"--to must be one of {', '.join(TARGETS)}, got {target!r}")
    if quantization is not None and target != "ctranslate2":
        raise MtError("--quantization applies to --to ctranslate2 only")
    if out_dir.exists() and not force:
        raise MtError(f"{out_dir} exists; add --force to replace it")
    require(NEEDS[target], target)
    from mt.translation.session import Session

    loaded = Session([checkpoint], "cpu").loaded[0]  # one model: an ensemble has no one file
    card = language_card(loaded, target)
    check_target(loaded, target)
    parent = out_dir.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=parent))
    except OSError as err:
        raise MtError(f"{out_dir}: cannot write ({err.strerror or err})") from None
    try:
        if target == "marian":
            write_marian(loaded, tmp)
        else:
            write_ctranslate2(loaded, tmp, quantization)
        if card is not None:
            write_card(card, tmp)
        _move_into_place(tmp, out_dir)
    except OSError as err:
        raise MtError(f"{out_dir}: cannot write ({err.strerror or err})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [] if card is None else how_to_ask(card, target, out_dir)


def _move_into_place(tmp: Path, out_dir: Path) -> None:
    """Rename `tmp` to `out_dir`; an existing `out_dir` (only with --force) is moved aside first
    and removed after, since a rename cannot replace a non-empty folder."""
    _readable(tmp)
    old = None
    if out_dir.is_dir() and not out_dir.is_symlink():
        old = out_dir.with_name(f".{out_dir.name}.{os.getpid()}.old")
        os.replace(out_dir, old)
    elif out_dir.exists() or out_dir.is_symlink():
        out_dir.unlink()
    os.replace(tmp, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _readable(folder: Path) -> None:
    """Modes as the umask gives new files: mkdtemp (and safetensors) make them private."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)
    for path in folder.iterdir():
        os.chmod(path, 0o666 & ~umask)
