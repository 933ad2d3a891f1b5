"""The engine: jobs, attempts, the loop and its lease, dispatch, runners and the pool."""
