"""Fair starts across concurrency keys: turns, weights and per-key limits."""
