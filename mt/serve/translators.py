"""The translators a model worker keeps, one per adapter and option set.

Building a Translator can cost a copy of the model (int8), so a worker keeps the last
CACHED_TRANSLATORS it used and builds one only for a set it has not used lately. Sampling gets a
fresh one each time, so its seed means the same on every request.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

from mt.translation.session import DecodeOptions, Session
from mt.translation.translator import Translator

CACHED_TRANSLATORS = 16


class Translators:
    """A worker's translators by adapter, option set and alignment, the least recently used
    dropped first. Used by the worker's thread alone."""

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple, Translator] = OrderedDict()

    def get(
        self,
        session: Session,
        options: DecodeOptions | None,
        alignment: bool,
        adapter: str | None = None,
    ) -> Translator:
        """The translator of `session` (the session of `adapter`, None: the base) for
        `options` and `alignment`, with scores."""
        if options is not None and options.sample:
            return session.translator(options, alignment, with_scores=True)
        key = (adapter, dataclasses.astuple(options or DecodeOptions()), alignment)
        if key in self._kept:
            self._kept.move_to_end(key)
            return self._kept[key]
        translator = session.translator(options, alignment, with_scores=True)
        self._kept[key] = translator
        if len(self._kept) > CACHED_TRANSLATORS:
            self._kept.popitem(last=False)
        return translator
