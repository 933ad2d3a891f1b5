"""Flow control: queue limits, concurrency keys, fairness and a rate-gated queue.

    DATABASE_URL=postgres://root@127.0.0.1:5432/ratequeue_bench_flow \\
        .venv/bin/python -m bench.flow            # a minute or two
    .venv/bin/python -m bench.flow --quick        # smoke run

Each scenario empties the tables, enqueues its jobs, starts a real ``qcluster`` (two
workers) and waits until every job is done. Throughput counts from the first finished job
to the last. The fairness and rate figures are read from the attempts the loop created:
their order (fairness) and their dispatch times (tokens spent per window).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bench.common import machine_lines, prepare_database
from bench.harness import Workers, empty_tables, terminate
from bench.queue import Rate, time_jobs

RATE, CAPACITY = 200, 50  # the rate-gated queue's token bucket, per second
SETTINGS: dict[str, Any] = {
    "MAX_CONCURRENCY": 100,
    "QUEUES": {
        "narrow": {"max_concurrency": 4},
        "tenants": {"max_concurrency": 1, "total_concurrency": 100},
        "fair": {"max_concurrency": 4, "total_concurrency": 4},
        "weighted": {"max_concurrency": 4, "total_concurrency": 50},
        "llm": {"max_concurrency": 20, "rate_limit": "llm"},
    },
    "RATE_LIMITS": {
        "llm": {"kind": "token bucket", "rate": RATE, "period": 1, "capacity": CAPACITY}
    },
}


def reset() -> None:
    from django_ratequeue.models import KeyLimit, QueueSetting, RateLimitState

    empty_tables()
    QueueSetting.objects.all().delete()
    KeyLimit.objects.all().delete()
    RateLimitState.objects.all().delete()


def run(count: int, timeout: float) -> Rate:
    """Start the workers, wait for ``count`` finished jobs, time first to last."""
    from django_ratequeue.engine.models import Job, Status

    done = Job.objects.filter(status=Status.COMPLETE).count
    running = Workers([["qcluster"]], {"BENCH_RATEQUEUE": json.dumps(SETTINGS)})
    try:
        rate, _startup = time_jobs(done, count, running, timeout)
    finally:
        running.kill()
    return rate


def throughput(queue: str, count: int, keys: int = 0) -> Rate:
    from bench.jobs import noop
    from django_ratequeue import enqueue_many

    reset()
    if keys:
        for key in range(keys):
            enqueue_many(noop, [[]] * (count // keys), queue=queue, concurrency_key=f"k{key}")
        count = count // keys * keys
    else:
        enqueue_many(noop, [[]] * count, queue=queue)
    return run(count, 60 + count / 20)


@dataclass(frozen=True)
class Fairness:
    big: int
    small: int
    worst: int  # starts before the small key's last job started

    def __str__(self) -> str:
        return (
            f"the small key's {self.small} jobs (enqueued after the big key's {self.big:,}) "
            f"all started within the first {self.worst + 1} starts; first come, first served "
            f"would take {self.big + self.small}"
        )


def fairness(big: int, small: int) -> Fairness:
    from bench.jobs import noop
    from django_ratequeue import enqueue_many
    from django_ratequeue.models import Attempt

    reset()
    enqueue_many(noop, [[]] * big, queue="fair", concurrency_key="big")
    handles = enqueue_many(noop, [[]] * small, queue="fair", concurrency_key="small")
    run(big + small, 60 + big / 20)
    order = list(Attempt.objects.order_by("pk").values_list("job_id", flat=True))
    return Fairness(big, small, max(order.index(h.id) for h in handles))


# The weighted case's keys: 50 of weight 1, 30 of weight 2, 20 of weight 4.
WEIGHT_CLASSES = ((1, 50), (2, 30), (4, 20))


@dataclass(frozen=True)
class Shares:
    rounds: int
    window: int  # starts counted, all keys backlogged throughout
    per_weight: dict[int, tuple[float, float, float]]  # weight -> mean, min, max starts per key
    rate: Rate  # jobs run per second, first to last

    def __str__(self) -> str:
        keys = sum(count for _weight, count in WEIGHT_CLASSES)
        unit = self.per_weight[1][0]
        parts = [
            f"weight {weight}: {mean:.1f} starts per key ({low:.0f}-{high:.0f}), "
            f"{mean / unit:.2f}x weight 1's"
            for weight, (mean, low, high) in sorted(self.per_weight.items())
        ]
        return (
            f"{keys} keys all backlogged, the first {self.window:,} starts: "
            + "; ".join(parts)
            + f" (the weights ask 1x, 2x, 4x); {self.rate} jobs run"
        )


def weighted(rounds: int, set_weights: bool = True) -> Shares:
    """100 keys of weights 1, 2 and 4, each with ``rounds`` x its weight jobs.

    Without ``set_weights`` (the control), every key of weight 1 with as many jobs as
    any other, so that all stay backlogged as long."""
    from bench.jobs import noop
    from django_ratequeue import enqueue_many, set_key_limit
    from django_ratequeue.models import Attempt

    reset()
    weights: dict[str, int] = {}
    for weight, count in WEIGHT_CLASSES:
        for n in range(count):
            weights[f"w{weight}-{n:02}"] = weight
    per_key = rounds * sum(weights.values()) // len(weights)
    for key, weight in weights.items():
        if set_weights:
            set_key_limit("weighted", key, weight=weight)
        jobs = rounds * weight if set_weights else per_key
        enqueue_many(noop, [[]] * jobs, queue="weighted", concurrency_key=key)
    analyze()
    total = rounds * sum(weights.values()) if set_weights else per_key * len(weights)
    rate = run(total, 60 + total / 20)
    # Every key has work until its last round: count the starts before the last two.
    window = (rounds - 2) * sum(weights.values())
    order = Attempt.objects.order_by("pk").values_list("concurrency_key", flat=True)[:window]
    starts = Counter(order)
    per_weight: dict[int, tuple[float, float, float]] = {}
    for weight, _count in WEIGHT_CLASSES:
        counts = [starts[key] for key, w in weights.items() if w == weight]
        per_weight[weight] = (sum(counts) / len(counts), min(counts), max(counts))
    return Shares(rounds, window, per_weight, rate)


def analyze() -> None:
    """ANALYZE the queue's tables after a bulk write (the shared server runs no autovacuum)."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")


def worst_window(times: list[tuple[datetime, int]]) -> int:
    """The most tokens within any one second of ``times`` (moment, cost)."""
    times = sorted(times)
    worst, low, spent = 0, 0, 0
    for moment, cost in times:
        spent += cost
        while (moment - times[low][0]).total_seconds() > 1:
            spent -= times[low][1]
            low += 1
        worst = max(worst, spent)
    return worst


@dataclass(frozen=True)
class Spending:
    jobs: int
    tokens: int
    seconds: float
    reserved_window: int  # most tokens reserved for any one second
    started_window: int  # most tokens of jobs started within any one second
    lateness: float  # the latest start after its reserved time, in seconds

    def __str__(self) -> str:
        return (
            f"{self.tokens:,} tokens in {self.jobs:,} jobs over {self.seconds:.1f} s: "
            f"{self.tokens / self.seconds:.0f} tokens/s against a rate of {RATE}/s; within any "
            f"1 s at most {self.reserved_window} reserved and {self.started_window} started "
            f"(the limit allows {CAPACITY + RATE}: capacity {CAPACITY} + {RATE} x 1 s; starts "
            f"were late by up to {self.lateness * 1000:.0f} ms)"
        )


def rate_gated(count: int) -> Spending:
    from bench.jobs import noop
    from django_ratequeue import enqueue
    from django_ratequeue.models import Attempt

    reset()
    costs = [(1, 5, 2, 1, 3, 8)[i % 6] for i in range(count)]
    for cost in costs:
        enqueue(noop, queue="llm", cost=cost)
    run(count, 60 + sum(costs) / RATE * 2)
    rows = Attempt.objects.values_list(
        "dispatched_at", "job__created_at", "job__start_at", "job__cost"
    )
    # A job whose tokens were there at once took them in the step that started it; a
    # reserved one keeps its reserved time as start_at.
    reserved = [
        (start if start > created else dispatched, cost)
        for dispatched, created, start, cost in rows
    ]
    started = [(dispatched, cost) for dispatched, _created, _start, cost in rows]
    lateness = max(
        (
            (dispatched - start).total_seconds()
            for dispatched, created, start, _ in rows
            if start > created
        ),
        default=0.0,
    )
    seconds = (max(started)[0] - min(started)[0]).total_seconds()
    return Spending(
        len(rows), sum(costs), seconds, worst_window(reserved), worst_window(started), lateness
    )


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.flow",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=5000, help="jobs per throughput run")
    parser.add_argument("--backlog", type=int, default=5000, help="the big key's jobs")
    parser.add_argument("--gated", type=int, default=1000, help="jobs through the llm queue")
    parser.add_argument("--rounds", type=int, default=20, help="the weighted keys' rounds")
    parser.add_argument("--only", choices=["weighted"], help="run these cases alone")
    parser.add_argument("--quick", action="store_true", help="smoke run with small counts")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.backlog, args.gated, args.rounds = 1000, 1000, 300, 5
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    os.environ["BENCH_RATEQUEUE"] = json.dumps(SETTINGS)
    signal.signal(signal.SIGTERM, terminate)
    import django

    django.setup()
    database = prepare_database()
    command = " ".join(["python -m bench.flow", *(sys.argv[1:] if argv is None else argv)])
    print("\n".join([*machine_lines(database), f"command: {command}"]), flush=True)
    measures = [
        ("queue with max_concurrency=4", lambda: throughput("narrow", args.jobs)),
        ("100 concurrency keys (queue limit 100)", lambda: throughput("tenants", args.jobs, 100)),
        ("fairness (queue limit 4, per key 4)", lambda: fairness(args.backlog, 10)),
        (f"rate-gated queue ({RATE}/s, capacity {CAPACITY})", lambda: rate_gated(args.gated)),
        ("weighted keys (total 50, per key 4)", lambda: weighted(args.rounds)),
        ("the same, every weight 1", lambda: weighted(args.rounds, set_weights=False)),
    ]
    if args.only == "weighted":
        measures = measures[-2:]
    try:
        for label, measure in measures:
            print(f"- {label}: {measure()}", flush=True)
    finally:
        reset()


if __name__ == "__main__":
    main()
