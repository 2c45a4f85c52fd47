"""What only the tests need, imported as `support.NAME` (tests/ is on pytest's `pythonpath`):

- `inprocess`: `mt ARGS` run inside the test process, put back after (behind `mt_cli`);
- `hub_models`: the small HF-format models of harness/hf_models.py as session fixtures, and
  their `mt import`s (`pytest_plugins = ["support.hub_models"]`);
- `cat_files`: TMX and XLIFF files made from Multi30k slices;
- `launchers`: torchrun launchers started, waited for and killed as the cluster tests do;
- `tasks`: the small tasks the tests train on (the reverse task, the five-sentence task,
  adapter configs, Multi30k slices, the tiny multilingual run's directions) and what their
  runs' metrics hold;
- `copier`: the tiny Transformer and copy task of the search tests;
- `references`: rules mt applies to whole arrays, spelled out for one item.

Plain functions and constants; fixtures are in conftest.py, which pytest loads by itself and no
test imports (the hub fixtures are a plugin a test module names). `REPO` is the repository's root.

What a benchmark or tool needs as well (a real `mt serve`, free ports, the browser, the small
HF models, zip bombs, injected spans and the span checks) is in harness/ at the repository
root, which tests and scripts both import: tests never import scripts/ (but the few tests whose
subject is a script) and scripts never import tests/ (tests/unit/test_room_imports.py).
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
