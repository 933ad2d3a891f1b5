"""Unique and debounced enqueues: one job per unique key at a time."""
