"""Caps on requests that hold a server thread while they wait.

Such are a job's event stream and a remote worker's waiting claim (docs/http-api.md,
"Long-lived requests are capped"). Each takes one of its holder's ``limit`` numbered
seats, a row unique per holder and number (two processes never take the same one), and
frees it as it ends. The rows work alike on PostgreSQL and SQLite, across hosts.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import IntegrityError, models, transaction

from django_ratequeue import clock
from django_ratequeue.engine.models import queue_db

# A seat outlives its request's longest life by this much before it lapses.
MARGIN = timedelta(seconds=60)


class RequestSeat(models.Model):
    """One request holding a server thread: its ``holder`` and its seat number.

    ``holder`` is ``stream:<owner>`` or ``claim:<key prefix>``. The seat is held until
    ``expires_at`` at most: a seat whose process died lapses then, the longest its request
    can last plus a margin."""

    holder = models.CharField(max_length=300)
    seat = models.PositiveSmallIntegerField()
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["holder", "seat"], name="ratequeue_seat_unique")
        ]

    def __str__(self) -> str:
        return f"{self.holder} #{self.seat}"


def take_seat(holder: str, limit: int, seconds: float) -> int | None:
    """Take a free seat of ``holder``'s ``limit`` for up to ``seconds``; return its id.

    Return None when all are held."""
    now = clock.now()
    db = queue_db()
    mine = RequestSeat.objects.using(db).filter(holder=holder)
    mine.filter(expires_at__lte=now).delete()
    held = set(mine.values_list("seat", flat=True))
    expires_at = now + timedelta(seconds=seconds) + MARGIN
    for number in range(limit):
        if number in held:
            continue
        try:
            with transaction.atomic(using=db):
                row = RequestSeat.objects.using(db).create(
                    holder=holder, seat=number, expires_at=expires_at
                )
        except IntegrityError:  # another process took it since the read
            continue
        return row.pk
    return None


def free_seat(seat_id: int) -> None:
    """Free a seat that :func:`take_seat` gave."""
    RequestSeat.objects.using(queue_db()).filter(pk=seat_id).delete()
