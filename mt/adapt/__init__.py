"""Adapting a trained model to a domain: LoRA adapters (lora.py) and their files (files.py)."""
