"""Adapting a trained model to a domain: LoRA adapters (lora.py) and their files (files.py),
and what keeps a fine-tune's general quality (keep.py, replay.py; defaults.py: the measured
defaults of both)."""
