"""Reading models of other toolkits into ordinary mt checkpoints (`mt import`).

files.py finds and reads a HF folder (or fetches a hub id); layers.py maps the BART-family
layer names and reorders the vocabulary; marian.py (OPUS-MT) and m2m.py (M2M-100, NLLB-200)
read each architecture's config and tokenizer; convert.py ties them into one checkpoint. The
model and tokenizer gain config fields for what these models need, never branches.
"""
