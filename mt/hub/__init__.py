"""Reading models of other toolkits into ordinary mt checkpoints (`mt import`).

files.py finds and reads a HF folder (or fetches a hub id); marian.py maps a MarianMTModel
(OPUS-MT) onto mt's Transformer and tokenizer; convert.py ties them into one checkpoint.
The model and tokenizer gain config fields for what these models need, never branches.
"""
