"""Adapting a trained model to a domain: what keeps a fine-tune's general quality (keep.py)."""
