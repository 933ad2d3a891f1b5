"""Remote workers' API keys: created (shown once), checked on every request, revoked.

A key reads ``<prefix>.<secret>``: the prefix (8 hex digits) finds the row and is shown in
lists; the secret is 256 random bits. Only the SHA-256 of the whole key is stored, and it
is compared in constant time. A revoked key fails its very next request.

An attempt a remote worker claimed names it ``remote:<key prefix>:<key name>/<instance>``
(:func:`worker_name`): whose it is, and whom to look for. :func:`read_worker_name` reads
such a name back, for every page and command that shows who runs what.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Q

from .. import clock
from ..conf import ratequeue_settings
from .bounds import check_queue_name
from .models import Attempt, WorkerKey

# A key's last_seen is written at most this often (a heartbeat stays one write).
LAST_SEEN_EVERY = timedelta(seconds=10)
# The longest a claim waits for work (seconds): a running worker asks at least this often.
MAX_CLAIM_WAIT = 60.0
PREFIX_LENGTH = 8
# What a remote worker's Attempt.worker begins with (a local worker's is a uuid's hex).
REMOTE = "remote:"


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_key(name: str, queues: Iterable[str]) -> tuple[WorkerKey, str]:
    """A new key for the remote ``queues``; returns the row and the key, which is stored
    nowhere: give it to the worker now."""
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
    """The row of ``key`` (revoked or not), or None when no row has it."""
    prefix, dot, _secret = key.partition(".")
    if not dot or len(prefix) != PREFIX_LENGTH or len(key) > 200:
        return None
    row = WorkerKey.objects.filter(prefix=prefix).first()
    if row is None or not hmac.compare_digest(row.hashed, digest(key)):
        return None
    return row


def seen(row: WorkerKey, host: str = "") -> None:
    """Record that ``row`` was used now (from ``host``), unless it was very recently
    (from the same host)."""
    now = clock.now()
    fresh = row.last_seen is not None and now - row.last_seen < LAST_SEEN_EVERY
    if fresh and host in ("", row.last_host):
        return
    changes: dict[str, object] = {"last_seen": now}
    if host:
        changes["last_host"] = host
    WorkerKey.objects.filter(pk=row.pk).update(**changes)


WORKER_LENGTH = Attempt._meta.get_field("worker").max_length or 64


def worker_name(key: WorkerKey, instance: str) -> str:
    """The ``Attempt.worker`` of what ``instance`` claims with ``key``:
    ``remote:<key prefix>:<key name>/<instance>``, the name cut to fit the column. The
    prefix tells whose it is, the name and the instance whom to look for."""
    head = key_tag(key)
    room = WORKER_LENGTH - len(head) - len(instance) - 1
    return f"{head}{key.name[: max(room, 0)]}/{instance}"


def key_tag(key: WorkerKey) -> str:
    """What the ``Attempt.worker`` of every worker of ``key`` begins with."""
    return f"{REMOTE}{key.prefix}:"


@dataclass(frozen=True)
class RemoteWorker:
    """A remote worker, as its attempts name it: its key's prefix and name (the name as
    it was when the worker claimed, perhaps cut short), and its instance."""

    prefix: str
    key_name: str
    instance: str

    @property
    def label(self) -> str:
        """``<key name>/<instance>``: whom to look for."""
        return f"{self.key_name}/{self.instance}"


def read_worker_name(worker: str) -> RemoteWorker | None:
    """Read back the ``Attempt.worker`` that :func:`worker_name` wrote; None when it is
    not a remote worker's (a local worker's id, or "" for nobody yet)."""
    if not worker.startswith(REMOTE):
        return None
    prefix, colon, rest = worker.removeprefix(REMOTE).partition(":")
    key_name, slash, instance = rest.rpartition("/")
    if len(prefix) != PREFIX_LENGTH or not colon or not slash or not instance:
        return None
    return RemoteWorker(prefix, key_name, instance)


def instance_attempts(key: WorkerKey, instance: str) -> Q:
    """The attempts ``instance`` claimed with ``key`` (whatever the key's name then)."""
    return Q(worker__startswith=key_tag(key), worker__endswith=f"/{instance}")


def running_per_instance() -> Counter[tuple[str, str]]:
    """The attempts each remote worker runs now, by (key prefix, instance)."""
    workers = Attempt.objects.filter(active=True, remote=True, ended_at=None).exclude(worker="")
    named = (read_worker_name(worker) for worker in workers.values_list("worker", flat=True))
    return Counter((remote.prefix, remote.instance) for remote in named if remote is not None)


def remote_worker_seen(queue: str) -> bool:
    """Say whether a worker whose key may claim from the remote ``queue`` was seen lately:
    a running one asks for work at least every ``MAX_CLAIM_WAIT`` seconds and heartbeats
    its attempts within ``REMOTE_LEASE``, and its key's ``last_seen`` lags by up to
    ``LAST_SEEN_EVERY``."""
    quiet = max(MAX_CLAIM_WAIT, ratequeue_settings().REMOTE_LEASE)
    since = clock.now() - LAST_SEEN_EVERY - timedelta(seconds=quiet)
    keys = WorkerKey.objects.filter(revoked_at=None, last_seen__gte=since)
    return any(queue in key.queues for key in keys.only("queues"))


def revoke(prefix: str) -> bool:
    """Revoke the key with ``prefix``; False if there is none not revoked yet."""
    return bool(
        WorkerKey.objects.filter(prefix=prefix, revoked_at=None).update(revoked_at=clock.now())
    )
