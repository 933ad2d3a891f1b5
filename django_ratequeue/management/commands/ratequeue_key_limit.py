"""``manage.py ratequeue_key_limit QUEUE KEY [--max-concurrency N] [--weight W]``.

Set a concurrency key's own limits at runtime, as ``set_key_limit`` does: the key's
limits become what is given, and neither clears them (docs/key-limits.md)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_ratequeue.jobs import set_key_limit


class Command(BaseCommand):
    help = (
        "Set a concurrency key's own max_concurrency and/or weight in a queue; without "
        "either, go back to the defaults. Recorded with --by; applied at the loop's next step."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queue", help="The queue's name.")
        parser.add_argument("key", help='The concurrency key ("" for the jobs without one).')
        parser.add_argument("--max-concurrency", type=int, help="0 to MAX_QUEUE_CONCURRENCY.")
        parser.add_argument("--weight", type=int, help="1 to 1000: its share of the starts.")
        parser.add_argument(
            "--by", default="manage.py ratequeue_key_limit", help="Who makes the change."
        )

    def handle(self, *args: Any, queue: str, key: str, **options: Any) -> None:
        try:
            row = set_key_limit(
                queue,
                key,
                max_concurrency=options["max_concurrency"],
                weight=options["weight"],
                changed_by=options["by"],
            )
        except ValueError as error:
            raise CommandError(str(error)) from None
        if row is None:
            self.stdout.write(f"Key {key!r} of queue {queue!r}: the defaults.")
            return
        limit = "default" if row.max_concurrency is None else row.max_concurrency
        weight = "default" if row.weight is None else row.weight
        self.stdout.write(
            f"Key {key!r} of queue {queue!r}: max_concurrency {limit}, weight {weight}."
        )
