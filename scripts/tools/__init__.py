"""Tools: `python -m scripts.tools.NAME --help`. Data getters, screenshots for the docs, the
two-commit comparison and the span fuzzer."""
