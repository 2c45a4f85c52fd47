"""Where and how decoding runs: the dtype, int8 and oneDNN choices, worker processes, shards."""
