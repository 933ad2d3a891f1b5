"""The batch that jobs enqueued in this context join (``with batch():``, ``adding()``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token

# The id of the batch open in this context ("" for none).
_open_batch: ContextVar[str] = ContextVar("ratequeue_batch", default="")


def current_batch_id() -> str:
    """Return the id of the batch that an enqueue here joins, or "" for none."""
    return _open_batch.get()


@contextmanager
def joining(batch_id: str) -> Iterator[None]:
    """Make the jobs enqueued in this block join batch ``batch_id``."""
    token = _open_batch.set(batch_id)
    try:
        yield
    finally:
        _open_batch.reset(token)


def enter_batch(batch_id: str) -> Token[str]:
    """Make the jobs enqueued from now on join batch ``batch_id``, until :func:`leave_batch`."""
    return _open_batch.set(batch_id)


def leave_batch(token: Token[str]) -> None:
    """Undo the :func:`enter_batch` that gave ``token``."""
    _open_batch.reset(token)
