"""Studies: `python -m scripts.studies.NAME --help`. The measurements behind docs/studies/, the
multilingual tables and the recipe search."""
