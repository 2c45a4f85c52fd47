"""The viewer's attention data: the model's own weights, and the alignment translate reports."""

from __future__ import annotations

import json

import torch

from mt.checkpoint import load_model
from mt.tokenizer import BOS
from mt.translation.requests import Plan, Request
from mt.translation.translator import Translator
from mt.views.attention import (
    attention_data,
    attention_json,
    layer_label,
    translate_with_attention,
)


def test_attention_json_holds_every_weight_and_the_translate_alignment(tiny_run):
    loaded = load_model(tiny_run / "best.pt")
    sentence = "Zwei Hunde spielen im Schnee."
    att = translate_with_attention(loaded.model, loaded.tokenizer, sentence, loaded.cfg.decode)
    data = json.loads(json.dumps(attention_json(att)))  # plain JSON, as a server would send it
    assert data == attention_data(loaded.model, loaded.tokenizer, sentence, loaded.cfg.decode)
    assert [k["id"] for k in data["kinds"]] == ["encoder", "decoder", "cross"]

    # The weights, recomputed here from the model for the same translation.
    src = torch.tensor(loaded.tokenizer.encode_src([sentence]))
    ids = [loaded.tokenizer.tgt.piece_to_id(p) for p in att.tgt_in_tokens[1:]]
    maps = loaded.model.attention_maps(src, torch.tensor([[BOS, *ids]]))
    for kind, ours in zip(data["kinds"], (maps.encoder, maps.decoder, maps.cross)):
        assert len(kind["weights"]) == loaded.cfg.model.encoder_layers
        for layer, w in zip(kind["weights"], ours):
            got = torch.tensor(layer)
            assert got.shape == (loaded.cfg.model.n_heads, len(kind["rows"]), len(kind["cols"]))
            torch.testing.assert_close(got, w[0], atol=0, rtol=0)

    # The alignment pairs are what `mt translate --alignment` reports for this sentence.
    translator = Translator(
        loaded.model, loaded.tokenizer, loaded.cfg.decode, torch.device("cpu"), alignment=True
    )
    best = translator.translate([Request(sentence, plan=Plan(protect=False, recase=False))])[0]
    assert best.text == data["translation"]
    assert data["alignment"]["pairs"] == [
        [s, t] for t, s in enumerate(best.hypotheses[0].alignment)
    ]
    assert data["alignment"]["tgt_tokens"] == att.tgt_out_tokens[:-1]


def test_layer_label_names_the_last_layer():
    assert layer_label(-1, 3) == "last layer (3 of 3)"
    assert layer_label(2, 3) == "last layer (3 of 3)"
    assert layer_label(0, 3) == "layer 1 of 3"
    assert layer_label(-3, 3) == "layer 1 of 3"
