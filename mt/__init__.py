"""mt: train Transformer translation models and use them from the shell or from Python.

From Python (docs/python-api.md):

    import mt
    model = mt.load("runs/tiny")                      # a run directory or checkpoint(s)
    mt.translate(model, "Ein Hund läuft.")            # -> "A dog runs."
    mt.score(model, ["Ein Hund."], ["A dog."])        # -> [PairScore]
    mt.fit("configs/tiny.yaml", run_dir="runs/tiny")  # train as `mt train` does

The names are looked up in `mt.api` on first use, so `import mt` (and the CLI's `--help`) does
not import torch. `MtError` is the one-line error a user's mistake raises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from mt.api import fit, load, score, translate
    from mt.errors import MtError

_HOMES = {
    "load": "mt.api",
    "translate": "mt.api",
    "score": "mt.api",
    "fit": "mt.api",
    "MtError": "mt.errors",
}
__all__ = ["MtError", "__version__", "fit", "load", "score", "translate"]  # = _HOMES


def __getattr__(name: str) -> Any:
    """A public name, imported from its home on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'mt' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
