"""Batches: groups of jobs with one completion and its callback."""
