"""The features built on the engine, each a package of its own (docs/concepts.md).

A plug-in that joins the loop declares its hooks in its ``plugin`` module, which
:func:`load` imports as the app starts (:mod:`django_ratequeue.apps`), in the order of
:data:`PLUGINS`: of two phases placed at the same place, the earlier plug-in's runs first.
"""

from __future__ import annotations

from importlib import import_module

# The plug-ins that declare hooks (django_ratequeue/engine/hooks.py), in the order they
# are loaded.
PLUGINS = ("schedules", "batches", "unique", "eta", "rollups", "retention")


def load() -> None:
    """Import each plug-in's ``plugin`` module, which declares its hooks."""
    for name in PLUGINS:
        import_module(f"{__name__}.{name}.plugin")
