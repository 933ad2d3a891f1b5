"""``manage.py ratequeue_status``: jobs per queue and status, the main loop and its workers."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ...queue.stats import COLUMNS, QueueOverview, queue_overview


def _time(moment: datetime | None) -> str:
    return "-" if moment is None else moment.isoformat(timespec="milliseconds")


class Command(BaseCommand):
    help = "Show how many jobs each queue holds by status, the main loop's state and workers."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print one JSON document")

    def handle(self, *args: Any, **options: Any) -> None:
        overview = queue_overview()
        if options["json"]:
            self.stdout.write(json.dumps(overview.as_json(), indent=2))
            return
        self.write_counts(overview)
        self.write_loop(overview)
        self.write_remote(overview)

    def write_counts(self, overview: QueueOverview) -> None:
        header = ["QUEUE", "LIMIT", *(label.upper() for _column, label in COLUMNS)]
        rows = [
            [q.name, q.limit_label, *(q.shown(column) for column, _label in COLUMNS)]
            for q in overview.queues
        ]
        rows.append(["(all)", "", *overview.totals_shown.values()])
        table = [header, *rows]
        widths = [max(len(row[column]) for row in table) for column in range(len(header))]
        for row in table:
            # Names and limits to the left, numbers to the right.
            cells = [
                cell.ljust(width) if column < 2 else cell.rjust(width)
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
        state = loop.state + (
            " (lease lapsed: a follower takes it over)" if loop.lease_lapsed else ""
        )
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
            roles = [role for role, on in (("leads the loop", worker.leads),
                                            ("runner serving", worker.serving)) if on]  # fmt: skip
            self.stdout.write(
                f"  {worker.host} pid {worker.pid}  last heartbeat {_time(worker.seen_at)}"
                + (f"  ({', '.join(roles)})" if roles else "")
            )

    def write_remote(self, overview: QueueOverview) -> None:
        """The remote workers, by key: where and when last seen, what they run now."""
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
