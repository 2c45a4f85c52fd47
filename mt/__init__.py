"""mt: train Transformer translation models and use them from the shell."""

__version__ = "0.1.0"
