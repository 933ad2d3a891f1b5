"""The features built on the engine, each a package of its own (docs/concepts.md)."""
