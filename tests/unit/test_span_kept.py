"""What the span ban learned of a vocabulary, kept on disk between processes (`mt.spans.kept`):
read back, it answers as the index that learned it; a file that is not such tables, or one
that would run code, is ignored."""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import pytest
from support.span_inputs import ALLOWED, DENSE

from mt.spans import kept
from mt.spans.index import PieceIndex
from mt.spans.open import open_starts
from mt.spans.rows import read


def _rows(seed: int, n: int) -> list[tuple[tuple, tuple[str, ...]]]:
    """Open texts of random rows over the nested vocabulary, each with allowed spans."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        row = "".join(rng.choice(DENSE) for _ in range(rng.randrange(1, 10)))
        state = read(row, open_starts(row))
        if state is not None:
            out.append((state, tuple(rng.sample(ALLOWED, rng.randrange(0, 3)))))
    return out


def test_tables_read_back_answer_as_the_index_that_learned_them(tmp_path: Path) -> None:
    """An index that learned on some rows, written and read into a new index of the same
    pieces: every row's answer is the learned index's, and the rows it saw need no walk."""
    learned = PieceIndex(DENSE)
    rows = _rows(1, 600)
    want = [learned.bans(state, ok).tolist() for state, ok in rows]
    assert learned.learned > 0
    path = tmp_path / "spans.pkl"
    assert kept.save(path, learned.tables())
    fresh = PieceIndex(DENSE)
    tables = kept.load(path)
    assert tables is not None and fresh.take(tables)
    walks = len(fresh._walks)
    assert [fresh.bans(state, ok).tolist() for state, ok in rows] == want
    assert len(fresh._walks) == walks and fresh.learned == 0  # nothing found again
    # New rows are answered as a new index answers them.
    other, new = _rows(2, 300), PieceIndex(DENSE)
    assert [fresh.bans(s, ok).tolist() for s, ok in other] == [
        new.bans(s, ok).tolist() for s, ok in other
    ]


@pytest.mark.parametrize(
    "content",
    [b"", b"not a pickle", pickle.dumps({"format": kept.FORMAT - 1}), pickle.dumps([1, 2])],
)
def test_a_file_that_is_not_such_tables_is_ignored(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "spans.pkl"
    path.write_bytes(content)
    tables = kept.load(path)
    assert tables is None or not PieceIndex(DENSE).take(tables)


class _Runs:
    """An object whose unpickling would run a command."""

    def __reduce__(self):
        return (print, ("this ran",))


def test_a_file_that_would_run_code_is_refused(tmp_path: Path, capsys) -> None:
    path = tmp_path / "spans.pkl"
    path.write_bytes(pickle.dumps({"format": kept.FORMAT, "tries": _Runs()}))
    assert kept.load(path) is None
    assert "this ran" not in capsys.readouterr().out


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MT_SPAN_CACHE", "off")
    assert kept.path_for("abc") is None and not kept.save(None, {})
    monkeypatch.setenv("MT_SPAN_CACHE", str(tmp_path))
    path = kept.path_for("abc")
    assert path is not None and path.parent == tmp_path and path.name.startswith("abc-")


def test_a_folder_that_cannot_be_written_fails_nothing(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the folder would be")
    assert not kept.save(blocked / "spans.pkl", PieceIndex(DENSE).tables())
