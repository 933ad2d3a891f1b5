"""Benchmarks for django-ratequeue: commands (``python -m bench.ratelimits``), not tests."""
