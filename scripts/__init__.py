"""The benchmarks, studies and tools around `mt`, run from the repository root with `python -m`:

- `scripts.bench.NAME`: timed comparisons whose numbers go into docs/studies/ (the summary:
  docs/benchmarks.md);
- `scripts.studies.NAME`: the measurements behind the pages of docs/studies/ and the recipes;
- `scripts.tools.NAME`: data getters, screenshots, the commit comparison, a fuzzer;
- `common.py` (what the benchmarks share), `processes.py` and `browser.py` (child processes,
  ports, `mt serve`, torchrun and headless Chromium, shared with tests/), `span_checks.py`;
- `demo.sh`, `gpu_check.sh` and `seeing_inside.sh`: run with `bash scripts/NAME.sh`.
"""
