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
from datetime import timedelta

from .. import clock
from ..conf import ratequeue_settings
from .bounds import check_queue_name
from .models import Attempt, WorkerKey

# A key's last_seen is written at most this often (a heartbeat stays one write).
LAST_SEEN_EVERY = timedelta(seconds=10)
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
    ``host`` is not given)."""
    now = clock.now()
    fresh = row.last_seen is not None and now - row.last_seen < LAST_SEEN_EVERY
    if fresh and host in ("", row.last_host):
        return
    changes: dict[str, object] = {"last_seen": now}
    if host:
        changes["last_host"] = host
    WorkerKey.objects.filter(pk=row.pk).update(**changes)


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
