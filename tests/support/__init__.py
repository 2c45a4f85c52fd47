"""What the tests need, imported as `support.NAME` (tests/ is on pytest's `pythonpath`); the
scripts that need the same (a benchmark starts the same server, builds the same model) import
it as `tests.support.NAME` from the repository root, so the code lives once, here.

- `processes`: a loopback port, a real `mt serve` (started and stopped within bounds, only its
  own process group ever killed), torchrun's path, the process table;
- `browser`: headless Chromium, or why there is none;
- `hf_models`: small models in HF's format, for `mt import`; `hub_models` the same as session
  fixtures, and their `mt import`s (`pytest_plugins = ["support.hub_models"]`);
- `bombs`: zip bombs, for zip uploads;
- `span_checks`: whether a translation kept its spans, and the fuzzer's line-by-line check;
  `span_inputs`: spans injected into sentences, fuzzed lines, a vocabulary of nested spans;
  `ban_oracle`: what the span ban must ban, found by scanning every piece;
- `inprocess`: `mt ARGS` run inside the test process, put back after (behind `mt_cli`);
- `cat_files`: TMX and XLIFF files made from Multi30k slices;
- `launchers`: torchrun launchers started, waited for and killed as the cluster tests do;
- `tasks`: the small tasks the tests train on and what their runs' metrics hold;
- `copier`: the tiny Transformer and copy task of the search tests;
- `references`: rules mt applies to whole arrays, spelled out for one item.

Plain functions and constants; fixtures are in conftest.py, which pytest loads by itself and no
test imports (the hub fixtures are a plugin a test module names). `REPO` is the repository's
root. The rooms' rule (tests/unit/test_room_imports.py): tests never import scripts/ (but the
few tests whose subject is a script); scripts/ imports tests/ only through `tests.support`;
tests/support/ imports neither scripts/ nor a test module.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
