"""Rules that mt applies to whole arrays at once, spelled out for one item: the references the
tests check the fast code against."""

from __future__ import annotations


def keep_pair(src: list[int], tgt: list[int], max_len: int, max_ratio: float) -> bool:
    """The length and ratio rule `mt.data.build.drop_reasons` vectorises, for one pair whose
    `src` ends with EOS (`tgt` has none): the reference the data tests check it against."""
    ls, lt = len(src), len(tgt) + 1
    return ls <= max_len and lt <= max_len and max(ls, lt) <= max_ratio * min(ls, lt)
