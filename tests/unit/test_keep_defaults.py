"""mt/adapt/defaults.py: `finetune.keep: auto` and the unset weights resolve to what was
measured, the same for every reader (the config's checks, the frozen base, the replayed corpus)."""

from __future__ import annotations

import pytest

from mt.adapt.defaults import Keeping, keeping
from mt.config import FinetuneConfig


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        # plain fine-tuning stays plain
        ({}, Keeping(False, "all", 1.0, 0.25, True)),
        # a full fine-tune that self-replays: the term on the replayed pairs, weight 2, at 0.1
        ({"replay_sources": "g.de"}, Keeping(True, "general", 2.0, 0.1, True)),
        # an adapter's self-replay was not measured with the term: none
        ({"replay_sources": "g.de", "adapter": "lora"}, Keeping(False, "all", 1.0, 0.25, True)),
        # turned off: self-replay alone at its own best weight
        ({"replay_sources": "g.de", "keep": "none"}, Keeping(False, "all", 1.0, 0.25, False)),
        # asked for on every pair: weight 1, and replay at 0.25 beside it
        ({"keep": "kl"}, Keeping(True, "all", 1.0, 0.25, False)),
        ({"keep": "kl", "keep_on": "general", "replay_sources": "g.de"},
         Keeping(True, "general", 2.0, 0.1, False)),
        # what the config says wins over every default
        ({"replay_sources": "g.de", "keep_weight": 3.0, "replay_weight": 0.5},
         Keeping(True, "general", 3.0, 0.5, True)),
        ({"keep": "kl", "keep_weight": 0.3}, Keeping(True, "all", 0.3, 0.25, False)),
    ],
)  # fmt: skip
def test_keeping_resolves_the_measured_defaults(given, expected):
    assert keeping(FinetuneConfig(**given)) == expected


def test_the_defaults_are_auto_and_unset():
    f = FinetuneConfig()
    assert (f.keep, f.keep_weight, f.replay_weight, f.keep_on) == ("auto", None, None, "all")
