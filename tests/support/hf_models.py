"""Small models in HF's format, built with transformers' own classes, for `mt import`.

The import tests (tests/support/hub_models.py holds their fixtures) and the parity script
(scripts/bench/import_parity.py) build the same models: a Marian (OPUS-MT) de-en, an M2M-100
with fairseq's dictionary, and an M2M-100 with NLLB-200's tokenizer. Each is trained for a few
dozen steps on a Multi30k slice so that its outputs vary with the input (random weights would
give the same few tokens for every sentence), with sentencepiece models trained on the same
slice, and saved as `save_pretrained` does, with the tokenizer files its HF tokenizer reads.
Nothing is downloaded.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import sentencepiece as spm
import torch

PAIRS = 3000  # pairs read; those of at most SHORT words train the model
SHORT = 10
STEPS = 120  # Adam steps at LR: outputs that differ by sentence and end, in seconds
LR = 1e-2


def read_slice(root: Path, split: str, lang: str, n: int, start: int = 0) -> list[str]:
    path = root / f"{split}.{lang}.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    return lines[start : start + n]


def train_spm(lines: list[str], prefix: Path, size: int, kind: str = "unigram") -> Path:
    """A unigram model as OPUS-MT's are (sentencepiece's own special ids); NLLB's is BPE."""
    text = prefix.with_suffix(".txt")
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(prefix),
        vocab_size=size,
        model_type=kind,
        character_coverage=1.0,
        minloglevel=2,
        num_threads=1,
    )
    return prefix.with_suffix(".model")


def marian_vocab(src_model: Path, tgt_model: Path) -> dict[str, int]:
    """OPUS-MT's layout: </s> 0, <unk> 1, the pieces of both models once, <pad> last."""
    vocab = {"</s>": 0, "<unk>": 1}
    for path in (src_model, tgt_model):
        sp = spm.SentencePieceProcessor(model_file=str(path))
        for i in range(sp.get_piece_size()):
            if sp.is_control(i) or sp.is_unknown(i):
                continue
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    return vocab


def brief_training(model, batches: list[dict[str, torch.Tensor]], steps: int = STEPS) -> None:
    """A few Adam steps of HF's own loss, then random logit biases so that they matter."""
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    model.train()
    for step in range(steps):
        batch = batches[step % len(batches)]
        loss = model(**batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    if hasattr(model, "final_logits_bias"):
        with torch.no_grad():
            model.final_logits_bias.normal_(0.0, 0.3)


def batches_of(tokenizer, src: list[str], tgt: list[str], size: int = 32) -> list[dict]:
    """Batches of the short pairs, as HF's seq2seq training takes them."""
    short = [(s, t) for s, t in zip(src, tgt) if max(len(s.split()), len(t.split())) <= SHORT]
    src, tgt = [s for s, _ in short], [t for _, t in short]
    out = []
    for i in range(0, len(src), size):
        enc = tokenizer(src[i : i + size], text_target=tgt[i : i + size], padding=True)
        labels = torch.tensor(enc["labels"])
        labels[labels == tokenizer.pad_token_id] = -100
        out.append(
            {
                "input_ids": torch.tensor(enc["input_ids"]),
                "attention_mask": torch.tensor(enc["attention_mask"]),
                "labels": labels,
            }
        )
    return out


def build_marian(root: Path, folder: Path, activation: str = "swish", steps: int = STEPS) -> Path:
    """A MarianMTModel de-en folder: 2+2 layers, d 32, joint vocabulary over two spm models."""
    from transformers import GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer

    folder.mkdir(parents=True)
    de = read_slice(root, "train", "de", PAIRS)
    en = read_slice(root, "train", "en", PAIRS)
    work = folder.parent / f"{folder.name}.spm"
    work.mkdir()
    src = train_spm(de, work / "src", 1000)
    tgt = train_spm(en, work / "tgt", 1000)
    (folder / "source.spm").write_bytes(src.read_bytes())
    (folder / "target.spm").write_bytes(tgt.read_bytes())
    vocab = marian_vocab(src, tgt)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    settings = {"source_lang": "de", "target_lang": "en", "separate_vocabs": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    pad = vocab["<pad>"]
    config = MarianConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=len(vocab),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=128,
        activation_function=activation,
        scale_embedding=True,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
        dropout=0.0,
    )
    torch.manual_seed(0)
    model = MarianMTModel(config)
    tokenizer = MarianTokenizer.from_pretrained(folder)
    brief_training(model, batches_of(tokenizer, de, en), steps)
    model.generation_config = GenerationConfig(
        bad_words_ids=[[pad]],
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        pad_token_id=pad,
        max_length=64,
        num_beams=4,
    )
    model.save_pretrained(folder)
    return folder


def build_m2m(root: Path, folder: Path, steps: int = STEPS) -> Path:
    """An M2M100ForConditionalGeneration folder (pre-norm, fairseq positions, language tokens):
    2+2 layers, d 32, one spm model over de, en and fr, trained de->en and de->fr."""
    from transformers import M2M100Tokenizer

    folder.mkdir(parents=True)
    text = {lang: read_slice(root, "train", lang, PAIRS) for lang in ("de", "en", "fr")}
    work = folder.parent / f"{folder.name}.spm"
    work.mkdir()
    model_file = train_spm(text["de"] + text["en"] + text["fr"], work / "spm", 1500)
    sp = spm.SentencePieceProcessor(model_file=str(model_file))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(sp.get_piece_size()):
        if not (sp.is_control(i) or sp.is_unknown(i)):
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    (work / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    tokenizer = M2M100Tokenizer(str(work / "vocab.json"), str(model_file), language_codes="m2m100")
    tokenizer.save_pretrained(folder)
    # the pieces, 100 language tokens, 8 made-up words
    size = len(vocab) + 100 + 8
    _train_m2m(folder, tokenizer, size, text, ("de", "en", "fr"), steps)
    return folder


NLLB_LANGS = {"de": "deu_Latn", "en": "eng_Latn", "fr": "fra_Latn"}


def build_nllb(root: Path, folder: Path, steps: int = STEPS) -> Path:
    """An M2M100ForConditionalGeneration folder with NLLB-200's tokenizer, as NLLB's are
    published: a BPE sentencepiece model (`sentencepiece.bpe.model`) whose ids are shifted by
    one behind `<s> <pad> </s> <unk>`, the 202 `fra_Latn`-style codes and `<mask>` after them
    as added tokens of `tokenizer.json`. transformers' own converter builds it from the spm
    model (NllbTokenizer.from_pretrained on a folder holding only that file), as it converts
    NLLB's; 2+2 layers, d 32, trained deu_Latn->eng_Latn and deu_Latn->fra_Latn."""
    from transformers import NllbTokenizer
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    folder.mkdir(parents=True)
    text = {lang: read_slice(root, "train", lang, PAIRS) for lang in NLLB_LANGS}
    work = folder.parent / f"{folder.name}.spm"
    work.mkdir()
    model_file = train_spm(sum(text.values(), []), work / "spm", 1500, kind="bpe")
    (work / "sentencepiece.bpe.model").write_bytes(model_file.read_bytes())
    # Without codes and <mask> first, so that they come after the pieces in NLLB's order.
    tokenizer = NllbTokenizer.from_pretrained(work, mask_token=None, extra_special_tokens=[])
    tokenizer.add_tokens(list(FAIRSEQ_LANGUAGE_CODES), special_tokens=True)
    tokenizer.add_special_tokens({"mask_token": "<mask>"})
    tokenizer.src_lang = NLLB_LANGS["de"]
    tokenizer.save_pretrained(folder)
    (folder / "sentencepiece.bpe.model").write_bytes(model_file.read_bytes())
    codes = tuple(NLLB_LANGS.values())
    named = {NLLB_LANGS[lang]: lines for lang, lines in text.items()}
    _train_m2m(folder, tokenizer, len(tokenizer), named, codes, steps)
    return folder


def _train_m2m(
    folder: Path, tokenizer, size: int, text: dict[str, list[str]], langs: tuple, steps: int
) -> None:
    """A 2+2-layer M2M-100 of `size` ids trained from langs[0] into the others, then saved
    into `folder` with a generation config as M2M-100's and NLLB's."""
    from transformers import GenerationConfig, M2M100Config, M2M100ForConditionalGeneration

    config = M2M100Config(
        vocab_size=size,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=128,
        dropout=0.0,
        attention_dropout=0.0,
        encoder_layerdrop=0.0,
        decoder_layerdrop=0.0,
    )
    torch.manual_seed(0)
    model = M2M100ForConditionalGeneration(config)
    batches = []
    src = langs[0]
    for tgt in langs[1:]:
        tokenizer.src_lang, tokenizer.tgt_lang = src, tgt
        batches += batches_of(tokenizer, text[src], text[tgt])
    order = torch.randperm(len(batches), generator=torch.Generator().manual_seed(0))
    brief_training(model, [batches[i] for i in order], steps)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=2, eos_token_id=2, pad_token_id=1, bos_token_id=0,
        forced_eos_token_id=2, max_length=64, num_beams=4,
    )  # fmt: skip
    model.save_pretrained(folder)
