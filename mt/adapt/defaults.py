"""What keeps the general domain when the config leaves it unsaid: the measured defaults.

`finetune.keep: auto` (the default), and `finetune.keep_weight` and `finetune.replay_weight`
left unset, resolve here, from what docs/fine-tuning.md measured (the demo model fine-tuned
280 updates on software strings, Multi30k standing for the general domain, three seeds):

- A full fine-tune that self-replays (`finetune.replay_sources`: the base's own translations of
  general text) adds the KL term toward the base on the replayed pairs alone, at weight 2, and
  replays at 0.1: 92-97% of plain fine-tuning's gain and 0.03-0.78 BLEU lost on Multi30k (94%,
  0.41 on average), where self-replay alone at its best weight (0.25) kept 82-91% (87%) and
  lost 0.71-1.06 (0.90). The term costs a forward pass of the base on the replayed rows.
- Every other run adds no term: plain fine-tuning stays plain, the base's own pairs replayed
  (`data.corpora`) kept 103% of the gain and gained on Multi30k without one, and a term on
  every pair costs the domain what it keeps (weight 1: 62% of the gain). An adapter's
  self-replay was not measured with the term, so it gets none unless asked for.
- Asked for (`keep: kl`), the term weighs 1 on every pair (the middle of its measured trade)
  and 2 on the general ones; self-replay without the term replays at 0.25.

One function answers for every reader (the config's checks, the run's frozen base, the replayed
corpus), so the defaults cannot disagree between them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mt.config import FinetuneConfig

WEIGHT_ON_ALL = 1.0  # keep: kl on every pair
WEIGHT_ON_GENERAL = 2.0  # the term on the general (replayed) pairs alone
REPLAY_WITH_TERM = 0.1  # self-replay's weight beside the term
REPLAY_ALONE = 0.25  # self-replay's weight without it


@dataclass(frozen=True)
class Keeping:
    """How a run keeps the general domain, every default resolved."""

    term: bool  # the KL term toward the frozen base is added
    on: Literal["all", "general"]  # the pairs it sees
    weight: float  # its weight (unused without the term)
    replay_weight: float  # the self-replayed corpus's weight (unused without replay_sources)
    auto: bool  # the term's presence was decided by `keep: auto`


def keeping(f: FinetuneConfig) -> Keeping:
    """The run's `Keeping` from its finetune section."""
    if f.keep == "auto":
        term = bool(f.replay_sources) and f.adapter == "none"
        on: Literal["all", "general"] = "general" if term else "all"
    else:
        term, on = f.keep == "kl", f.keep_on
    weight = f.keep_weight
    if weight is None:
        weight = WEIGHT_ON_GENERAL if on == "general" else WEIGHT_ON_ALL
    replay = f.replay_weight
    if replay is None:
        replay = REPLAY_WITH_TERM if term and on == "general" else REPLAY_ALONE
    return Keeping(term, on, weight, replay, f.keep == "auto")
