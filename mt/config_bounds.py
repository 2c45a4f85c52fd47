"""The bounds that turn a typo into one error line, and the two helpers every rule of
mt/config_rules.py uses: a range check that names the key, and the first failed check raised."""

from __future__ import annotations

from mt.errors import MtError

# Upper bounds that keep absurd values from reaching an allocation or a C integer: each sits far
# above any real setting, so what they reject is a typo.
MAX_LENGTH = 65_535  # token counts are 16-bit in the token store (mt/data/store.py)
MAX_VOCAB = 1_000_000
MAX_WIDTH = 65_536  # model.d_model, model.d_ff
MAX_LAYERS = 256
MAX_BEAM = 1_024
MAX_SHORTLIST = 100_000  # decode.shortlist: target pieces per source piece
MAX_BATCH_TOKENS = 1 << 24  # train.max_tokens, decode.max_tokens, --max-tokens
MAX_ACCUM = 1_024
MAX_THREADS = 4_096
MAX_SEED = 2**63 - 1  # torch.manual_seed takes a 64-bit integer
MAX_TIMEOUT_S = 30 * 24 * 3600  # a collective timeout of a month: longer is a typo


def in_range(name: str, value: float, low: float, high: float) -> tuple[bool, str]:
    """A validate() check: `low <= value <= high`, with a message naming the key and bounds."""
    return low <= value <= high, f"{name} must be in [{low:,}, {high:,}], got {value:,}"


def raise_first(checks: list[tuple[bool, str]]) -> None:
    """The first failed check's message, as the one-line error."""
    for ok, message in checks:
        if not ok:
            raise MtError(message)
