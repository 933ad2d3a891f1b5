"""Each queue's per-minute figures, counted as the loop moves jobs."""
