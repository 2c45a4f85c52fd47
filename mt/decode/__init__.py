"""Decoding: search algorithms and the raw-text translator built on them."""
