"""Two clusters against one database, as two hosts run them: they share the work, run no
job twice, and hold every limit together (docs/operations.md, "More than one host")."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from django_ratequeue import Status, enqueue_many
from django_ratequeue.models import Job
from tests.cluster import wait_for
from tests.queue import jobs

MAX_CONCURRENCY = 3
QUEUES = {
    "wide": {"max_concurrency": 2},
    # Each key a copy of the queue (one job at a time), two jobs across the keys.
    "keyed": {"max_concurrency": 1, "total_concurrency": 2},
    "narrow": {"max_concurrency": 1},
}
KEYS = ("k0", "k1", "k2")


def peak(spans: list[tuple[float, float]]) -> int:
    """The most spans running at one instant (one ending as another starts: not both)."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def test_two_clusters_share_the_work_and_hold_the_limits(cluster: Any, tmp_path: Path) -> None:
    # Two hosts: the same settings, their own workers; four workers for three slots.
    hosts = [cluster(workers=2, MAX_CONCURRENCY=MAX_CONCURRENCY, QUEUES=QUEUES) for _ in "ab"]
    log = tmp_path / "runs.log"
    groups: dict[str, tuple[str, ...]] = {}
    for queue, count in (("wide", 600), ("narrow", 100)):
        labels = [f"{queue}-{i}" for i in range(count)]
        enqueue_many(jobs.span, [[str(log), label, 0.005] for label in labels], queue=queue)
        groups.update((label, (queue,)) for label in labels)
    for key in KEYS:
        labels = [f"keyed-{key}-{i}" for i in range(100)]
        enqueue_many(
            jobs.span,
            [[str(log), label, 0.005] for label in labels],
            queue="keyed",
            concurrency_key=key,
        )
        groups.update((label, ("keyed", key)) for label in labels)
    assert len(groups) == 1000

    wait_for(
        lambda: Job.objects.filter(status=Status.COMPLETE).count() == 1000,
        timeout=180,
        message="1,000 jobs to complete on two clusters",
    )

    runs = [line.split() for line in log.read_text().splitlines()]
    assert Counter(label for label, *_ in runs) == Counter(list(groups))  # each ran, once
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}
    pids = Counter(int(pid) for _, pid, *_ in runs)
    for host in hosts:
        assert set(pids) & set(host.pids()), f"no job ran on {host.process.pid}: {pids}"
    spans: defaultdict[str, list[tuple[float, float]]] = defaultdict(list)
    for label, _, start, end in runs:
        for group in ("all", *groups[label]):
            spans[group].append((float(start), float(end)))
    peaks = {group: peak(group_spans) for group, group_spans in spans.items()}
    assert peaks["all"] <= MAX_CONCURRENCY, peaks
    assert peaks["wide"] <= 2 and peaks["narrow"] == 1 and peaks["keyed"] <= 2, peaks
    assert all(peaks[key] == 1 for key in KEYS), peaks
