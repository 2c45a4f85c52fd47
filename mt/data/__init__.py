"""Training data: reading corpora (`corpus`), the prepared token store (`store`), preparing it
from raw text (`prepare`) and turning it into batches (`loader`)."""
