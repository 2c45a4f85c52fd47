"""What `mt serve` was told, whole: `ServeConfig`, made once by `mt.serve.serve` and handed as
it is to the app and to each model's worker, so a new setting is a field here and a read where
it is used, not an argument threaded through each layer. It imports no web framework: the
server's options are checked before fastapi is imported."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mt.plan import PlanOptions
from mt.serve.limits import Limits

if TYPE_CHECKING:
    from mt.serve.glossaries import Stored


@dataclass(kw_only=True)
class ServeConfig:
    """The models by name (several paths: an ensemble) and the rules every request meets."""

    models: dict[str, list[Path]]
    device: str = "cpu"
    limits: Limits = field(default_factory=Limits)
    api_keys: list[bytes] | None = None
    cors_origins: list[str] = field(default_factory=list)
    dtype: str | None = None  # --dtype: what every decode computes in (mt.translation.session)
    # The steps around search of every request (`mt serve`'s plan flags: the number guard, the
    # glossary constrained at once); a request chooses its own `split_sentences`.
    plan: PlanOptions = field(default_factory=PlanOptions)
    own_glossary: Stored | None = None  # plan.glossary, read: for requests of its direction
    adapters: dict[str, dict[str, Path]] = field(default_factory=dict)  # model -> name -> file
