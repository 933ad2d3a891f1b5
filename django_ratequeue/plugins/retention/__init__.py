"""The pruning of finished jobs and old per-minute figures."""
