"""Claim a unique key for an enqueue (``unique_for``, ``debounce``), or find who holds it.

One INSERT ... ON CONFLICT on the claim's row, in the enqueue's transaction, lets the
database arbitrate between concurrent enqueues: PostgreSQL makes the second wait on the
first's row, SQLite serialises its writers. docs/deduplication.md tells why it holds.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import DateTimeField, QuerySet, Value
from django.db.models.functions import Greatest

from django_ratequeue import clock
from django_ratequeue.engine.models import Job, Status, queue_connection, queue_db
from django_ratequeue.plugins.unique.models import UniqueClaim

# How long a claim is kept after it expired (a debounced job whose start passed while
# the loop was away still takes the burst's calls), before pruning deletes it.
CLAIM_GRACE = timedelta(days=1)

_TABLE = f'"{UniqueClaim._meta.db_table}"'


_RETURNING = " RETURNING job_id"


def _upsert(update: str) -> str:
    """Return the claim's INSERT ... ON CONFLICT ``update`` ... RETURNING job_id."""
    return (
        f'INSERT INTO {_TABLE} ("key", job_id, expires_at) VALUES (%s, %s, %s) '
        f'ON CONFLICT ("key") DO UPDATE SET {update}{_RETURNING}'
    )


# unique_for: take the key over only when its window has passed.
_CLAIM_WINDOW = _upsert(
    f"job_id = excluded.job_id, expires_at = excluded.expires_at WHERE {_TABLE}.expires_at <= %s"
)
# debounce: lock the key's row (and push its expiry, never earlier); its job_id says who
# holds it.
_CLAIM_BURST = _upsert(
    f"expires_at = CASE WHEN {_TABLE}.expires_at > excluded.expires_at "
    f"THEN {_TABLE}.expires_at ELSE excluded.expires_at END"
)


def _holder_after(upsert: str, params: list[Any], key: str) -> str:
    """Run a claim's upsert; return the id of the job that holds ``key`` after it.

    From the upsert's RETURNING where the database has it (SQLite from 3.35), else from
    a read of the claim, as when the upsert changed nothing."""
    connection = queue_connection()
    returning = connection.features.can_return_columns_from_insert
    with connection.cursor() as cursor:
        cursor.execute(upsert if returning else upsert.removesuffix(_RETURNING), params)
        row = cursor.fetchone() if returning else None
    if row is not None:
        return str(row[0])
    # Locked by the upsert on PostgreSQL, committed by its writer if not ours.
    return UniqueClaim.objects.using(queue_db()).values_list("job_id", flat=True).get(pk=key)


def claim_window(key: str, job_id: str, now: datetime, window: timedelta) -> str | None:
    """Claim ``key`` for ``job_id`` until ``now + window``; return the live holder's job id.

    None when ``job_id`` has the claim (a new one, or one whose window had passed). Call
    it in the enqueue's transaction: the claim commits with the job."""
    adapt = queue_connection().ops.adapt_datetimefield_value
    params = [key, job_id, adapt(now + window), adapt(now)]
    holder = _holder_after(_CLAIM_WINDOW, params, key)
    return None if holder == job_id else holder


def claim_burst(
    key: str, job_id: str, start_at: datetime, args: list[Any], kwargs: dict[str, Any]
) -> str | None:
    """Debounce into the key's job not started yet; return its id, or None to write ``job_id``.

    The held job, while still SCHEDULED, takes ``args`` and ``kwargs``, and starts at
    ``start_at`` unless it starts later already (a start never moves earlier); the
    UPDATE's condition loses to the loop's promotion (which re-checks ``start_at``), never
    races it. Otherwise the claim points at ``job_id``, which the caller writes in the
    same transaction."""
    adapt = queue_connection().ops.adapt_datetimefield_value
    holder = _holder_after(_CLAIM_BURST, [key, job_id, adapt(start_at)], key)
    if holder == job_id:
        return None
    pushed = (
        Job.objects.using(queue_db())
        .filter(pk=holder, status=Status.SCHEDULED)
        .update(
            args=args,
            kwargs=kwargs,
            start_at=Greatest("start_at", Value(start_at, output_field=DateTimeField())),
        )
    )
    if pushed:
        return holder
    UniqueClaim.objects.using(queue_db()).filter(pk=key).update(job_id=job_id)
    return None


def live_claims() -> QuerySet[UniqueClaim]:
    """Return the claims whose window has not passed: retention keeps their jobs."""
    return UniqueClaim.objects.using(queue_db()).filter(expires_at__gt=clock.now())


def prune_claims(limit: int | None = None) -> int:
    """Delete claims expired more than CLAIM_GRACE ago; return how many.

    At most ``limit`` of them, if given."""
    claims = UniqueClaim.objects.using(queue_db())
    old = claims.filter(expires_at__lt=clock.now() - CLAIM_GRACE)
    if limit is not None:
        old = claims.filter(pk__in=list(old.values_list("pk", flat=True)[:limit]))
    return old.delete()[0]
