"""Translation of raw text: the session that loads a checkpoint, the translator that batches
requests, and the stages around search (sentences, protected spans, numbers, terms, casing,
HTML, pivoting)."""
