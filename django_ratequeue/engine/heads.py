"""The lease heads: the values a step's lease renewal reads for the features, by name.

The renewal (:mod:`.lease`) is one statement: it renews the lease and returns, beside it,
the columns every registered head adds. A feature declares its head where it lives, at
import, with :func:`register_lease_head`; the step reads it by name
(``renewal.next_deferred``). docs/concepts.md ("The main loop") tells why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone
from django.utils.dateparse import parse_datetime


def first(values: Sequence[Any]) -> Any:
    """Return the one column a head read, as read."""
    return values[0]


@dataclass(frozen=True)
class LeaseHead:
    """A value the renewal reads: its ``name``, its SQL and how its columns decode.

    ``columns`` gives the SQL expressions (a scalar subquery each, through an index)
    that the renewal adds to its RETURNING, for the queue's connection; ``decode`` turns
    the values they read into the head's value."""

    name: str
    columns: Callable[[BaseDatabaseWrapper], Sequence[str]]
    decode: Callable[[Sequence[Any]], Any] = first


# The registered heads, by name.
LEASE_HEADS: dict[str, LeaseHead] = {}


def register_lease_head(head: LeaseHead) -> LeaseHead:
    """Add ``head`` to what every renewal reads; a name is registered once."""
    known = LEASE_HEADS.get(head.name)
    if known is not None and known is not head:
        raise ValueError(f"A lease head named {head.name!r} is registered already.")
    LEASE_HEADS[head.name] = head
    return head


def lease_heads() -> list[LeaseHead]:
    """Return the registered heads in the order of their names (the renewal's columns)."""
    return [LEASE_HEADS[name] for name in sorted(LEASE_HEADS)]


def aware(value: datetime | str) -> datetime:
    """Return a datetime column read with raw SQL as an aware datetime.

    SQLite gives naive UTC, or text where a UNION hides the column's type."""
    moment = parse_datetime(value) if isinstance(value, str) else value
    assert moment is not None
    return moment.replace(tzinfo=UTC) if timezone.is_naive(moment) else moment


def earliest(values: Sequence[Any]) -> datetime | None:
    """Return the earliest of the moments read (None: none was)."""
    return min((aware(value) for value in values if value is not None), default=None)
