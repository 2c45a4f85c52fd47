"""scripts/common.py, the helpers the benchmark scripts share: tables, alternated rounds, the
machine line and the corpus reader."""

from __future__ import annotations

import gzip
import json

import pytest

from scripts import common


def test_markdown_table_right_aligns_the_numbers():
    text = common.markdown_table(
        ("setting", "s", "BLEU"), [("beam 5", 1.5, "37.55"), ("greedy", 2, "-")]
    )
    assert text.splitlines() == [
        "| setting | s | BLEU |",
        "| --- | ---: | ---: |",
        "| beam 5 | 1.5 | 37.55 |",
        "| greedy | 2 | - |",
    ]


def test_alternate_runs_every_setting_once_per_round_in_turn():
    calls: list[str] = []
    runs = {name: (lambda n=name: calls.append(n) or n.upper()) for name in ("a", "b", "c")}
    outputs, seconds = common.alternate(3, runs)
    assert calls == ["a", "b", "c"] * 3  # alternated, not a's three rounds first
    assert outputs == {"a": "A", "b": "B", "c": "C"}
    assert all(len(s) == 3 and min(s) >= 0 for s in seconds.values())
    with pytest.raises(ValueError):
        common.alternate(0, runs)


def test_machine_names_the_cpu_and_the_load():
    info = common.machine()
    assert info["cpus"] >= 1 and len(info["loadavg"]) == 3
    line = common.describe_machine(info)
    assert line.startswith(info["cpu"]) and f"{info['cpus']} cores" in line and "load" in line
    if info["family"] != "?":  # one model name covers several CPUs: family and model tell
        assert f"(family {info['family']}, model {info['model']})" in line


def test_read_lines_reads_gzip_and_write_text_is_atomic(tmp_path):
    path = tmp_path / "a.de.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("Ein Hund.\nZwei Hunde.\n")
    assert common.read_lines(path) == ["Ein Hund.", "Zwei Hunde."]
    out = tmp_path / "out.json"
    common.write_text(out, "{}\n")
    assert out.read_text() == "{}\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "a.de.gz",
        "out.json",
    ]


def test_a_report_is_printed_and_written_with_its_machine_and_load(tmp_path, capsys):
    report = {"machine": common.machine(), "rows": [1, 2]}
    common.print_report(report, tmp_path / "r.json")
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((tmp_path / "r.json").read_text("utf-8"))
    assert printed["rows"] == [1, 2] and len(printed["load_after"]) == 3
    assert printed["machine_line"] == common.describe_machine(report["machine"])
