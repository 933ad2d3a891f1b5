"""``manage.py ratequeue_status``: show jobs per queue and status, the main loop, its workers.

With ``--watch``, redrawn every interval with each queue's last minute
(monitor/figures.py)."""

from __future__ import annotations

import argparse
import json
import math
import time
from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.jobs import Status
from django_ratequeue.monitor.counts import COLUMNS, QueueCounts
from django_ratequeue.monitor.figures import Figures, by_queue
from django_ratequeue.monitor.overview import QueueOverview, queue_overview

# --watch redraws at least this often, and at most once an hour.
MAX_INTERVAL = 3600.0
# Clears a terminal and puts the cursor at its top left.
CLEAR = "\x1b[H\x1b[2J"


def _time(moment: datetime | None) -> str:
    return "-" if moment is None else moment.isoformat(timespec="milliseconds")


def _count(count: int, capped: bool) -> str:
    """Return a count for people: "10000+" when it stopped at its limit."""
    return f"{count}+" if capped else str(count)


def _duration(seconds: float | None) -> str:
    """Return a percentile for people: "-" when there was no sample."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    return f"{seconds:.1f}s" if seconds < 60 else f"{seconds / 60:.1f}min"


def _interval(text: str) -> float:
    """Return --interval as finite seconds, more than 0 and at most MAX_INTERVAL."""
    try:
        interval = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(interval) and 0 < interval <= MAX_INTERVAL):
        raise argparse.ArgumentTypeError(
            f"must be more than 0 and at most {MAX_INTERVAL:g} seconds, not {text!r}"
        )
    return interval


# --watch's columns of the last minute, and the counts among them.
MINUTE_HEADER = ["STARTED/MIN", "DONE/MIN", "FAILED/MIN", "WAIT P95", "RUN P95"]
COUNTED = ("started", "completed", "failed")
# The columns aligned to the left.
LEFT = frozenset({"QUEUE", "LIMIT", "STATE"})


def _minute_cells(figures: Figures | None) -> list[str]:
    """Return a queue's cells under MINUTE_HEADER.

    The total row sums only the counts: percentiles do not add up across queues."""
    if figures is None:
        return ["0", "0", "0", "-", "-"]
    counts = [str(getattr(figures, name)) for name in COUNTED]
    return [*counts, _duration(figures.wait_p95), _duration(figures.run_p95)]


def state(queue: QueueCounts) -> str:
    """Return why a queue's waiting jobs wait, as far as its counts tell.

    Paused, saturated (its running jobs fill its limit), or gated by a rate limit."""
    if queue.limit_note.startswith("paused"):
        return "paused"
    if not queue.counts[Status.WAITING]:
        return ""
    if queue.counts["dispatched"] + queue.counts[Status.RUNNING] >= queue.limit:
        return "saturated"
    config = ratequeue_settings().QUEUES.get(queue.name)
    return f"rate limit {config.rate_limit}" if config and config.rate_limit else ""


class Command(BaseCommand):
    help = (
        "Show how many jobs each queue holds by status, the main loop's state and workers; "
        "--watch redraws them, with each queue's last minute, until Ctrl-C."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print one JSON document")
        parser.add_argument(
            "--watch",
            action="store_true",
            help="redraw every --interval seconds until Ctrl-C, with each queue's jobs "
            "started, completed and failed in the last minute and their wait and run p95",
        )
        parser.add_argument(
            "--interval",
            type=_interval,
            default=2.0,
            help=f"seconds between two frames of --watch (default 2, at most {MAX_INTERVAL:g})",
        )
        # Stop --watch after this many frames (for tests).
        parser.add_argument("--frames", type=int, default=0, help=argparse.SUPPRESS)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["watch"]:
            if options["json"]:
                raise CommandError("--json prints one document: it does not go with --watch.")
            self.watch(options["interval"], options["frames"])
            return
        overview = queue_overview()
        if options["json"]:
            self.stdout.write(json.dumps(overview.as_json(), indent=2))
            return
        self.write_counts(overview)
        self.write_loop(overview)
        self.write_remote(overview)

    def watch(self, interval: float, frames: int) -> None:
        """Draw a frame every ``interval`` seconds, until Ctrl-C (or ``frames`` frames, if given).

        On a terminal each frame is drawn over the last one, elsewhere one after the
        other."""
        clear = self.stdout.isatty()
        drawn = 0
        try:
            while True:
                self.draw_frame(clear)
                drawn += 1
                if drawn == frames:
                    return
                time.sleep(interval)
        except KeyboardInterrupt:
            self.stdout.write("")

    def draw_frame(self, clear: bool = False) -> None:
        """Draw one frame of --watch: the counts, each queue's last minute, the loop, its workers.

        The last minute is the last whole one (the current one is partial)."""
        now = clock.now()
        overview = queue_overview()
        last_minute = by_queue(now - timedelta(minutes=1), now - timedelta(minutes=1))
        if clear:
            self.stdout.write(CLEAR, ending="")
        self.stdout.write(f"ratequeue_status at {_time(now)} (Ctrl-C to stop)")
        self.write_counts(overview, last_minute)
        self.write_loop(overview)
        self.write_remote(overview)

    def write_counts(
        self, overview: QueueOverview, last_minute: dict[str, Figures] | None = None
    ) -> None:
        header = ["QUEUE", "LIMIT", *(label.upper() for _column, label in COLUMNS)]
        rows = [
            [
                q.name,
                q.limit_label,
                *(_count(q.counts[column], column in q.capped) for column, _label in COLUMNS),
            ]
            for q in overview.queues
        ]
        capped = overview.totals_capped
        rows.append(["(all)", "", *(_count(n, c in capped) for c, n in overview.totals.items())])
        if last_minute is not None:
            header += [*MINUTE_HEADER, "STATE"]
            for row, queue in zip(rows, overview.queues, strict=False):
                row += [*_minute_cells(last_minute.get(queue.name)), state(queue)]
            total = [sum(getattr(f, name) for f in last_minute.values()) for name in COUNTED]
            rows[-1] += [*map(str, total), "", "", ""]
        table = [header, *rows]
        widths = [max(len(row[column]) for row in table) for column in range(len(header))]
        for row in table:
            # Names, limits and states to the left, numbers to the right.
            cells = [
                cell.ljust(width) if header[column] in LEFT else cell.rjust(width)
                for column, (cell, width) in enumerate(zip(row, widths, strict=True))
            ]
            self.stdout.write("  ".join(cells).rstrip())
        self.stdout.write(
            "DISPATCHED: handed to a worker that has not started them yet."
            + (
                f" Counts stop at {overview.count_limit} (shown as {overview.count_limit}+)."
                if overview.totals_capped
                else ""
            )
        )

    def write_loop(self, overview: QueueOverview) -> None:
        loop = overview.loop
        if overview.no_worker.local:
            state = f"{loop.state} (no worker is alive to run it)"
        elif loop.lease_lapsed:
            state = f"{loop.state} (lease lapsed: a follower takes it over)"
        else:
            state = loop.state
        self.stdout.write("")
        self.stdout.write(f"Main loop: {state}, generation {loop.generation}")
        self.stdout.write(f"  lease expires {_time(loop.lease_expires_at)}")
        self.stdout.write(f"  next wake     {_time(loop.next_wake_at)}")
        self.stdout.write(f"  last step     {_time(loop.updated_at)}")
        self.stdout.write("")
        if not overview.workers:
            self.stdout.write("Live workers: none (is manage.py qcluster running?)")
            return
        self.stdout.write(f"Live workers: {len(overview.workers)}")
        for worker in overview.workers:
            self.stdout.write(
                f"  {worker.host} pid {worker.pid}  last heartbeat {_time(worker.seen_at)}"
                + (f"  ({worker.roles})" if worker.roles else "")
            )

    def write_remote(self, overview: QueueOverview) -> None:
        """Write the remote workers, by key: where and when last seen, what they run now."""
        if not overview.remote_workers:
            return
        self.stdout.write("")
        self.stdout.write(f"Remote worker keys: {len(overview.remote_workers)}")
        for remote in overview.remote_workers:
            host = f" from {remote.host}" if remote.host else ""
            self.stdout.write(
                f"  {remote.prefix} {remote.key} ({', '.join(remote.queues)})  last seen "
                f"{_time(remote.last_seen)}{host}  running {remote.running}"
            )
            for instance, running in remote.instances.items():
                self.stdout.write(f"    worker {instance}  running {running}")
