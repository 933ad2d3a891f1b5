"""The promised start of a waiting job: its place, and when it will start."""
