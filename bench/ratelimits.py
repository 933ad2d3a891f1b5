"""Rate-limit decisions per second and over-admission: django-ratequeue against its peers.

    .venv/bin/python -m bench.ratelimits             # full run, 3 s per measurement
    .venv/bin/python -m bench.ratelimits --quick     # smoke run

Every measurement runs in real worker processes that start together; each counts its own
decisions for a fixed time. Throughput runs use a limit no run can exhaust, so decisions
are admits; one run measures denies; the over-admission runs race for a limit of 100.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from bench.common import machine_lines, prepare_database, version
from bench.contenders import CONTENDERS, LIMITS_STRATEGIES, Decider, build_decider
from bench.pool import MeasurementFailed, Pool, Tally, Task

GENEROUS_LIMIT = 10**9  # per hour: more than any run can use, so every decision admits
DENY_LIMIT = 10  # per hour: after the first few decisions every decision is a deny
RACE_LIMIT = 100  # per hour, raced for by every process
SHARDS = 8
PEERS = ("drf", "django-ratelimit", "limits", "naive-orm")


@dataclass(frozen=True)
class Outcome:
    decisions: int
    admitted: int
    elapsed: float

    @classmethod
    def of(cls, tallies: Sequence[Tally]) -> Outcome:
        return cls(
            decisions=sum(tally.decisions for tally in tallies),
            admitted=sum(tally.admitted for tally in tallies),
            elapsed=max(tally.elapsed for tally in tallies),
        )

    @property
    def rate(self) -> float:
        return self.decisions / self.elapsed


@dataclass(frozen=True)
class Target:
    text: str
    met: Callable[[Outcome], bool]


def at_least(rate: int) -> Target:
    return Target(f"≥ {rate:,}/s", lambda outcome: outcome.rate >= rate)


@dataclass(frozen=True)
class Scenario:
    label: str
    processes: int
    hot_key: bool
    limit: int
    shards: int = 1  # applies to ours only; the peers have no shards
    tries: int | None = None  # a race: each process tries this often, admits are counted
    target: Target | None = None

    @property
    def setup(self) -> tuple[int, bool, int, int | None]:
        """What the peers see: scenarios differing only in shards share the peers' runs."""
        return (self.processes, self.hot_key, self.limit, self.tries)


def scenarios(processes: int, tries: int) -> list[Scenario]:
    n = processes
    exact = Target(f"exactly {RACE_LIMIT}", lambda outcome: outcome.admitted == RACE_LIMIT)
    none_over = Target(
        f"over-admission 0 (≤ {RACE_LIMIT})", lambda outcome: outcome.admitted <= RACE_LIMIT
    )
    race = f"over-admission: {n} processes x {tries} tries on one key, limit {RACE_LIMIT}/hour"
    return [
        Scenario("(a) 1 process, one hot key", 1, True, GENEROUS_LIMIT, target=at_least(1500)),
        Scenario(
            f"(b) {n} processes, distinct keys", n, False, GENEROUS_LIMIT, target=at_least(4000)
        ),
        Scenario(f"(c) {n} processes, one hot key", n, True, GENEROUS_LIMIT),
        Scenario(
            f"(c) {n} processes, one hot key, ours shards={SHARDS}",
            n,
            True,
            GENEROUS_LIMIT,
            shards=SHARDS,
            target=at_least(4000),
        ),
        Scenario(f"(d) {race}", n, True, RACE_LIMIT, tries=tries, target=exact),
        Scenario(
            f"(d) {race}, ours shards={SHARDS}",
            n,
            True,
            RACE_LIMIT,
            shards=SHARDS,
            tries=tries,
            target=none_over,
        ),
        Scenario(
            f"(e) 1 process, one hot key, denies (limit {DENY_LIMIT}/hour)", 1, True, DENY_LIMIT
        ),
    ]


class Bench:
    """Runs every (scenario, contender) measurement once and keeps what it found."""

    def __init__(self, pool: Pool, seconds: float) -> None:
        self.pool = pool
        self.seconds = seconds
        self.run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        self.outcomes: dict[tuple[object, str], Outcome | str] = {}

    def outcome(self, scenario: Scenario, contender: str) -> Outcome | str:
        """The measurement's outcome, or the error that stopped it."""
        setup = (scenario.setup, scenario.shards) if contender == "ours" else scenario.setup
        if (setup, contender) not in self.outcomes:
            self.outcomes[setup, contender] = self.measure(scenario, contender)
        return self.outcomes[setup, contender]

    def measure(self, scenario: Scenario, contender: str) -> Outcome | str:
        shards = scenario.shards if contender == "ours" else 1
        run = f"{self.run_id}-{len(self.outcomes)}-{contender}"
        tasks = [
            Task(
                contender=contender,
                key=f"{run}-hot" if scenario.hot_key else f"{run}-{process}",
                limit=scenario.limit,
                shards=shards,
                seconds=None if scenario.tries else self.seconds,
                tries=scenario.tries,
            )
            for process in range(scenario.processes)
        ]
        try:
            outcome: Outcome | str = Outcome.of(self.pool.run(tasks))
        except MeasurementFailed as failure:
            outcome = str(failure).strip().splitlines()[-1]
            print(f"  {contender} failed:\n{failure}", file=sys.stderr)
        print(f"  {scenario.label} — {contender}: {describe(outcome, scenario)}", file=sys.stderr)
        return outcome


def describe(outcome: Outcome | str, scenario: Scenario) -> str:
    if isinstance(outcome, str):
        return f"error: {outcome}"[:60]
    if scenario.tries:
        return f"{outcome.admitted} admitted (+{max(0, outcome.admitted - RACE_LIMIT)})"
    return f"{outcome.rate:,.0f}/s"


def table(bench: Bench, plan: Sequence[Scenario], columns: Sequence[str]) -> str:
    """A Markdown table: decisions/s (ours ÷ peer) per scenario, admits in the races."""
    header = ["scenario", "target", *(CONTENDERS[column].label for column in columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for scenario in plan:
        ours = bench.outcome(scenario, "ours") if "ours" in columns else None
        target = scenario.target.text if scenario.target else "—"
        if scenario.target and ours is not None:
            met = isinstance(ours, Outcome) and scenario.target.met(ours)
            target = f"{scenario.target.text}: {'met' if met else 'MISSED'}"
        cells = [scenario.label, target]
        for column in columns:
            outcome = bench.outcome(scenario, column)
            cell = describe(outcome, scenario)
            ratio_applies = column != "ours" and not scenario.tries
            if ratio_applies and isinstance(ours, Outcome) and isinstance(outcome, Outcome):
                cell += f" ({ours.rate / outcome.rate:.2f}x)"
            cells.append(cell)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def statements_per_decision(contender: str, shards: int = 1) -> str:
    """The SQL statements one admit and one deny send, as Django logs them."""
    generous = build_decider(contender, f"queries-{time.time()}", GENEROUS_LIMIT, shards)
    for _ in range(10 * shards):
        generous()  # creates the rows: what follows is the steady state
    scarce = build_decider(contender, f"queries-{time.time()}", shards, shards)
    found = [
        f"{kind} {len(statements)} ({'; '.join(statements)})"
        for kind, statements in (
            ("admit", logged(generous, True)),
            ("deny", logged(scarce, False)),
        )
    ]
    return ", ".join(found)


def logged(decide: Decider, answer: bool) -> list[str]:
    """The first words of each statement of the first decision that gives ``answer``."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(100):
        with CaptureQueriesContext(connection) as queries:
            if decide() is answer:
                return [" ".join(query["sql"].split()[:2]) + " …" for query in queries]
    raise RuntimeError(f"no decision answered {answer} in 100 tries")


def environment(database: str) -> list[str]:
    from django.conf import settings

    try:
        import redis

        redis_version = redis.Redis.from_url(settings.REDIS_URL).info()["redis_version"]
    except Exception as error:
        redis_version = f"unavailable ({error})"
    *machine, database_line = machine_lines(database)
    return [
        *machine,
        f"{database_line}; Redis {redis_version} at {settings.REDIS_URL}",
        f"Python {platform.python_version()}, Django {version('django')}, "
        f"DRF {version('djangorestframework')}, django-ratelimit {version('django-ratelimit')}, "
        f"limits {version('limits')}, psycopg {version('psycopg')}, redis-py {version('redis')}",
    ]


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ratelimits",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="duration of each throughput measurement"
    )
    parser.add_argument("--processes", type=int, default=8, help="processes in the 8-process runs")
    parser.add_argument(
        "--tries", type=int, default=100, help="attempts per process in the over-admission race"
    )
    parser.add_argument(
        "--limits-strategy",
        choices=LIMITS_STRATEGIES,
        default="moving-window",
        help="the strategy `limits` runs with",
    )
    parser.add_argument(
        "--contenders",
        default=",".join(("ours", *PEERS)),
        help=f"comma-separated subset of: ours, {', '.join(PEERS)}",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 0.5 s per measurement, 25 tries"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.tries = 0.5, 25
    chosen = [name.strip() for name in args.contenders.split(",") if name.strip()]
    unknown = sorted(set(chosen) - {"ours", *PEERS})
    if unknown or not chosen:
        parser.error(f"--contenders takes names from: ours, {', '.join(PEERS)} (got {unknown})")
    if args.seconds <= 0 or args.processes < 1 or args.tries < 1:
        parser.error("--seconds, --processes and --tries must be positive")
    if args.processes * args.tries <= RACE_LIMIT:
        parser.error(f"the race needs more than {RACE_LIMIT} attempts: raise --tries")
    args.columns = [
        f"limits-{args.limits_strategy}" if name == "limits" else name for name in chosen
    ]
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()
    database = prepare_database()
    command = " ".join(["python -m bench.ratelimits", *(sys.argv[1:] if argv is None else argv)])
    print("\n".join([*environment(database), f"command: {command}"]), flush=True)
    for contender, shards in (("ours", 1), ("ours", SHARDS), ("naive-orm", 1)):
        if contender in args.columns:
            try:
                statements = statements_per_decision(contender, shards)
            except Exception as error:
                statements = f"error ({error})"
            label = f"{contender} shards={shards}" if contender == "ours" else contender
            print(f"SQL statements per decision, {label}: {statements}", flush=True)
    plan = scenarios(args.processes, args.tries)
    started = time.monotonic()
    with Pool(args.processes) as pool:
        bench = Bench(pool, args.seconds)
        report = table(bench, plan, args.columns)
    print()
    print(report)
    print()
    print(
        f"decisions/s summed over processes, {args.seconds:g} s per measurement; "
        "(nx) = ours ÷ that peer; over-admission rows count admits, (+n) above the limit. "
        f"Run took {time.monotonic() - started:.0f} s."
    )


if __name__ == "__main__":
    main()
