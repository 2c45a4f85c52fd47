"""The `mt` command line: parse flags, call one function per command, map errors to exit codes.

Commands live by what they work on: runs (training.py), students of teachers (distilling.py),
a trained model's output (decoding.py), a model's inside (inspect.py), a model behind HTTP
(serving.py), models of other toolkits in and out (hub.py), adapters (adapter.py); options.py
holds what they share.
They join the app as their module is imported, in the order `mt --help` lists them.
"""

# isort: skip_file
from mt.cli import training  # noqa: F401  (train, prepare, plot, average)
from mt.cli import distilling  # noqa: F401  (distill)
from mt.cli import decoding  # noqa: F401  (translate)
from mt.cli import evaluating  # noqa: F401  (eval)
from mt.cli import scoring  # noqa: F401  (score)
from mt.cli import inspecting  # noqa: F401  (attention, vectors)
from mt.cli import serving  # noqa: F401  (serve)
from mt.cli import hub  # noqa: F401  (import, export)
from mt.cli import adapter  # noqa: F401  (adapter merge)
from mt.cli.app import app, main

__all__ = ["app", "main"]
