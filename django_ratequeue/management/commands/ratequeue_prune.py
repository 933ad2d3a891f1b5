"""``manage.py ratequeue_prune``: delete the finished jobs and figures kept past retention.

That is finished jobs older than RATEQUEUE["RETENTION"], and the queues' per-minute
figures older than RATEQUEUE["ROLLUP_RETENTION"]."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_ratequeue.plugins.retention.pruning import prune


class Command(BaseCommand):
    help = (
        "Delete finished jobs (and their attempts) older than RATEQUEUE['RETENTION'], and "
        "the queues' per-minute figures older than RATEQUEUE['ROLLUP_RETENTION']."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--batch-size", type=int, default=1000, help="Jobs deleted per transaction."
        )

    def handle(self, *args: Any, batch_size: int, **options: Any) -> None:
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1.")
        count = prune(batch_size)
        self.stdout.write(f"Pruned {count} finished job{'s' if count != 1 else ''}.")
