"""Benchmarks: `python -m scripts.bench.NAME --help`. Each prints its numbers beside the machine
they came from (scripts/common.py); the tables live in docs/studies/, summarised in
docs/benchmarks.md."""
