"""Each row's open text carried as an integer from the row it extends, so the span ban's
per-step work is a few array operations and a lookup for each row with a span under way, not a
Python object per row (`mt.spans.bans` asks at every step).

Search extends each row by one piece a step. Beam and greedy search say which row of the step
before each row extends (`parents`); otherwise the rows of a step are matched to the rows of the
rule's previous call by a hash of their tokens, each match checked token by token. Either way a
row takes its parent's state: an id into `OpenTexts.states` (0: no span under way). Then:

- a row whose parent holds no open text and whose last piece can open none (nor hold the `@`
  an address may reach back from) holds none either (open text is prefix-closed): one array
  operation for all of them, most rows of most steps;
- a row whose parent holds one takes the id that the table of (state, piece) gives
  (`OpenTexts.step`); the open text is grown only the first time a pair is met, in any row;
- a row whose open text must be read from its text (its first start died, or a piece that can
  open one after a row that had none) is read as before, and so is every row whose parent was
  not found (the first call of a search after another search's steps).

The hash's match is checked on the tokens themselves, so a hash collision or a call from another
search costs a read of the row, never a wrong answer; a search that gives the parents vouches
for them (each row's token before last is checked against its parent's last, and a step where one
differs goes by the hash).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from mt.spans.rows import OpenTexts


@dataclass(frozen=True)
class Carried:
    """What one call leaves the next: its rows' tokens, their hashes (sorted, with the row of
    each; None until a call without its search's `parents` needs them), and their state ids,
    valid for one generation of `OpenTexts.states`."""

    generation: int
    tokens: np.ndarray  # (R, t)
    hashes: np.ndarray | None  # (R,), ascending
    order: np.ndarray | None  # (R,): the row of each hash
    ids: np.ndarray  # (R,)


class RowStates:
    """The state ids of the rows of one search's steps, over the open texts `opens` (kept with
    the vocabulary's index, and shared by its translators under the index's lock); one per
    span rule, as each translator runs one search at a time."""

    def __init__(self, opens: OpenTexts) -> None:
        self.opens = opens
        texts = opens.texts
        # A piece after which a row whose parent holds no open text must be read as text.
        self.reads = np.array([opens.opener[v] or "@" in t for v, t in enumerate(texts)])
        self._carried: Carried | None = None

    def ids(self, tokens: np.ndarray, parents: np.ndarray | None = None) -> np.ndarray:
        """(R,) int64: the state id of each row of `tokens` (R, t), t >= 1, in
        `self.opens.states`. Call with the index's lock held. `parents` (R,), from a search
        that knows them (beam search's reorder): the row of the previous call each row
        extends, taken in place of matching rows by hash; the search vouches for them, and a
        row whose token before last is not its parent's last sends every row to the hash."""
        opens = self.opens
        opens.bound()
        n, t = tokens.shape
        hashes = None
        pids = self._given(tokens, parents)
        if pids is not None:
            found = np.ones(n, dtype=bool)
        else:
            mult = _multipliers(t)
            before = tokens[:, :-1] @ mult[: t - 1]  # wraps: a hash modulo 2**64
            hashes = before + tokens[:, -1] * mult[t - 1]
            found, pids = self._parents(tokens, before)
        last = tokens[:, -1]
        ids = np.zeros(n, dtype=np.int64)
        # A parent with a span under way and a piece whose step is kept: looked up together.
        grows = np.flatnonzero(pids)
        if len(grows):
            ids[grows] = opens.known(pids[grows], last[grows])
        # Rows to look at one by one: a step not kept yet, a piece that may open a span after
        # a parent without one, or no parent found.
        todo = np.flatnonzero(~found | (ids < 0) | ((pids == 0) & self.reads[last]))
        if len(todo):
            rows = tokens[todo]
            for k, (r, pid, v, has) in enumerate(
                zip(todo.tolist(), pids[todo].tolist(), last[todo].tolist(), found[todo].tolist())
            ):
                ids[r] = self._one(rows[k], v, pid if has else None)
        self._carried = Carried(opens.generation, tokens.copy(), *_by_hash(hashes), ids)
        return ids

    def _given(self, tokens: np.ndarray, parents: np.ndarray | None) -> np.ndarray | None:
        """The state ids of the rows' `parents` in the previous call, where they can be taken
        (the same generation, rows one token longer, each row's token before last its
        parent's last); None where not."""
        carried = self._carried
        n, t = tokens.shape
        if (
            parents is None
            or t == 1
            or carried is None
            or carried.generation != self.opens.generation
            or carried.tokens.shape[1] != t - 1
            or len(parents) != n
        ):
            return None
        if n and (parents.min() < 0 or parents.max() >= len(carried.ids)):
            return None
        if not np.array_equal(carried.tokens[parents, -1], tokens[:, -2]):
            return None
        return carried.ids[parents]

    def _one(self, row: np.ndarray, last: int, pid: int | None) -> int:
        """The state id of `row`, whose last piece is `last` and whose parent's id is `pid`
        (None: no parent found)."""
        opens = self.opens
        if pid is None:
            return opens.intern(opens.read_row(row, last))
        if pid:
            cid = opens.step(pid, last)
            if cid is not None:
                return cid
        return opens.intern(opens.of(row, last, opens.states[pid]))

    def _parents(self, tokens: np.ndarray, before: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Whether each row of `tokens` extends a row of the previous call by one piece
        (checked on the tokens, not only their hashes), and that row's state id (0 where
        none)."""
        n, t = tokens.shape
        carried = self._carried
        if t == 1:  # every row extends the empty row, which holds no open text
            return np.ones(n, dtype=bool), np.zeros(n, dtype=np.int64)
        if (
            carried is None
            or carried.generation != self.opens.generation
            or carried.tokens.shape[1] != t - 1
            or not len(carried.tokens)
        ):
            return np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64)
        if carried.hashes is None:  # the call before took its parents from its search
            hashes, order = _by_hash(carried.tokens @ _multipliers(t - 1)[: t - 1])
            carried = self._carried = dataclasses.replace(carried, hashes=hashes, order=order)
        at = np.searchsorted(carried.hashes, before).clip(max=len(carried.hashes) - 1)
        rows = carried.order[at]
        same = (carried.hashes[at] == before) & (carried.tokens[rows] == tokens[:, :-1]).all(1)
        return same, np.where(same, carried.ids[rows], 0)


def _by_hash(hashes: np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray | None]:
    """`hashes` sorted, and the row of each (`Carried`); None and None for None."""
    if hashes is None:
        return None, None
    order = np.argsort(hashes, kind="stable")
    return hashes[order], order


def _mix(n: int) -> np.ndarray:
    """(n,) int64: the hash's multiplier of each position, a splitmix64 of the position, odd so
    that no position's token drops out; the same in every call."""
    with np.errstate(over="ignore"):
        x = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x | np.uint64(1)).view(np.int64)


_MULT = _mix(1024)


def _multipliers(t: int) -> np.ndarray:
    """The multipliers of rows of `t` tokens."""
    return _MULT if t <= len(_MULT) else _mix(t)
