"""Remote workers' API keys: created (shown once), checked on every request, revoked.

A key reads ``<prefix>.<secret>``: the prefix (8 hex digits) finds the row and is shown in
lists; the secret is 256 random bits. Only the SHA-256 of the whole key is stored, compared
in constant time; a revoked key fails its very next request. A remote worker's attempts
hold its key (``Attempt.worker_key``) and its program's name (``Attempt.worker``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.bounds import check_queue_name
from django_ratequeue.engine.models import Attempt, WorkerKey

# A key's last_seen is written at most this often (a heartbeat stays one write), and at
# least every third of the lease (:func:`lease_lapsed` reads it).
LAST_SEEN_EVERY = timedelta(seconds=10)
# How many leases a remote attempt may stay lapsed while its key is silent (its server
# away, say) before it is taken as lost all the same (docs/remote-workers.md).
SILENT_LEASES = 10
# The longest a claim waits for work (seconds): a running worker asks at least this often.
MAX_CLAIM_WAIT = 60.0
PREFIX_LENGTH = 8


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_key(name: str, queues: Iterable[str]) -> tuple[WorkerKey, str]:
    """Create a key for the remote ``queues``, and return its row and the key.

    The key is stored nowhere: give it to the worker now."""
    queues = sorted(set(queues))
    if not name.strip():
        raise ValueError("A worker key needs a name (who or what uses it).")
    if not queues:
        raise ValueError("A worker key needs at least one queue to claim from.")
    for queue in queues:
        check_queue_name(queue)
    prefix = secrets.token_hex(PREFIX_LENGTH // 2)
    key = f"{prefix}.{secrets.token_urlsafe(32)}"
    row = WorkerKey.objects.create(
        name=name.strip(), prefix=prefix, hashed=digest(key), queues=queues, created_at=clock.now()
    )
    return row, key


def find_key(key: str) -> WorkerKey | None:
    """Return the row of ``key`` (revoked or not), or None when no row has it."""
    prefix, dot, _secret = key.partition(".")
    if not dot or len(prefix) != PREFIX_LENGTH or len(key) > 200:
        return None
    row = WorkerKey.objects.filter(prefix=prefix).first()
    if row is None or not hmac.compare_digest(row.hashed, digest(key)):
        return None
    return row


def seen(row: WorkerKey, host: str = "") -> None:
    """Record that ``row`` was used now (from ``host``), unless it was very recently.

    The record is skipped only when the last one is recent and from the same host (or
    ``host`` is not given): a record is at most a third of a lease old while the key's
    workers are heard from (:func:`lease_lapsed` relies on it)."""
    now = clock.now()
    lag = min(LAST_SEEN_EVERY, timedelta(seconds=ratequeue_settings().REMOTE_LEASE / 3))
    fresh = row.last_seen is not None and now - row.last_seen < lag
    if fresh and host in ("", row.last_host):
        return
    changes: dict[str, object] = {"last_seen": now}
    if host:
        changes["last_host"] = host
    WorkerKey.objects.filter(pk=row.pk).update(**changes)
    row.last_seen = now


def renew_after_outage(row: WorkerKey, away: float, grace: float) -> int:
    """Give a fresh lease to the key's attempts whose lease lapsed in the last ``away``
    seconds, during which a worker of the key could not reach the server; return how many.

    The worker says so with its first request that gets through (docs/remote-workers.md):
    the server was away, most likely for all its workers, and the one holding such an
    attempt comes back within ``grace`` seconds (its longest back-off), then keeps the
    lease. ``away`` counts up to :data:`SILENT_LEASES` leases."""
    lease = ratequeue_settings().REMOTE_LEASE
    now = clock.now()
    window = timedelta(seconds=min(max(away, 0.0), lease * SILENT_LEASES) + lease)
    return Attempt.objects.filter(
        worker_key=row, ended_at=None, lease_expires_at__gte=now - window, lease_expires_at__lt=now
    ).update(lease_expires_at=now + timedelta(seconds=lease + grace))


def lease_lapsed(
    lease_end: datetime | None, key_seen: datetime | None, revoked: bool, now: datetime
) -> bool:
    """Say whether a remote attempt's worker lost it: its lease lapsed for good.

    A lease lapses only while the server hears from the attempt's key: one that ran out
    while none of its workers could reach the server (the server away) is left to them,
    and renewed when one is back (:func:`renew_after_outage`), so that the worker still
    holding its report can keep it. So it is lost once the key (revoked: at once) was
    heard after its end, or after :data:`SILENT_LEASES` leases."""
    if lease_end is None or lease_end >= now:
        return False
    silence = timedelta(seconds=ratequeue_settings().REMOTE_LEASE * SILENT_LEASES)
    heard = key_seen is not None and key_seen > lease_end
    return revoked or heard or lease_end < now - silence


def running_per_instance() -> Counter[tuple[str, str]]:
    """Return the attempts each remote worker runs now, by (key prefix, instance)."""
    workers = Attempt.objects.filter(active=True, ended_at=None, worker_key__isnull=False)
    return Counter(workers.exclude(worker="").values_list("worker_key__prefix", "worker"))


def remote_worker_seen(queue: str) -> bool:
    """Say whether a worker whose key may claim from the remote ``queue`` was seen lately.

    A running one asks for work at least every ``MAX_CLAIM_WAIT`` seconds and heartbeats
    its attempts within ``REMOTE_LEASE``, and its key's ``last_seen`` lags by up to
    ``LAST_SEEN_EVERY``."""
    quiet = max(MAX_CLAIM_WAIT, ratequeue_settings().REMOTE_LEASE)
    since = clock.now() - LAST_SEEN_EVERY - timedelta(seconds=quiet)
    keys = WorkerKey.objects.filter(revoked_at=None, last_seen__gte=since)
    return any(queue in key.queues for key in keys.only("queues"))


def revoke(prefix: str) -> bool:
    """Revoke the key with ``prefix``; return False if there is none not revoked yet."""
    return bool(
        WorkerKey.objects.filter(prefix=prefix, revoked_at=None).update(revoked_at=clock.now())
    )
