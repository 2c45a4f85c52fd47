"""What the tests and the scripts both run `mt` with, and the made-up inputs they both feed it.

- `processes`: a loopback port, a real `mt serve` (started and stopped within bounds, only its
  own process group ever killed), torchrun's path, the process table;
- `browser`: headless Chromium, or why there is none;
- `hf_models`: small models in HF's format, for `mt import`;
- `bombs`: zip bombs, for zip uploads;
- `span_checks`: whether a translation kept its spans, and the fuzzer's line-by-line check;
- `span_inputs`: spans injected into sentences, fuzzed lines, and a vocabulary of nested spans;
- `ban_oracle`: what the span ban must ban, found by scanning every piece.

Why a package of its own: tests/ must not import scripts/ (a test would then pass or fail by
a benchmark's code), and scripts/ must not import tests/ (a benchmark would need the test
tree); yet a benchmark and a test that measure one thing must build the same model, the same
bomb and the same injected spans, so the code lives once, here. None of it is something a user
of `mt` runs, so it is not in mt/ and not installed with it: the repository root is on the path
for both (pytest's `pythonpath`; scripts run from the root with `python -m`). It imports `mt`
and nothing of tests/ or scripts/ (tests/unit/test_room_imports.py checks). What only tests
need (pytest fixtures, torchrun launchers that fail a test) is in tests/support/; what only
benchmarks need (measured children, tables) is in scripts/.
"""
