"""The benchmarks, studies and tools around `mt`, run from the repository root with `python -m`:

- `scripts.bench.NAME`: timed comparisons whose numbers go into docs/studies/ (the summary:
  docs/benchmarks.md);
- `scripts.studies.NAME`: the measurements behind the pages of docs/studies/ and the recipes;
- `scripts.tools.NAME`: data getters, screenshots, the commit comparison, a fuzzer;
- `common.py` (what the benchmarks share) and `measure.py` (a measured child and its tree);
  what they share with the tests (`mt serve`, ports, the browser, the small HF models, zip
  bombs, injected spans and the span checks) is in tests/support/, imported as `tests.support`;
- `demo.sh`, `gpu_check.sh` and `seeing_inside.sh`: run with `bash scripts/NAME.sh`.
"""
