"""``manage.py ratequeue_queue pause|resume|set|reset NAME [N]``: change a queue's limits at
runtime (they override RATEQUEUE["QUEUES"]; the loop applies them at once)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...queue.control import change_queue
from ...queue.limits import QueueLimits


class Command(BaseCommand):
    help = (
        "Pause or resume a queue, set its max_concurrency, or reset it to the settings, "
        "without a deploy."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["pause", "resume", "set", "reset"])
        parser.add_argument("name", help="The queue's name.")
        parser.add_argument(
            "max_concurrency", nargs="?", type=int, help="For 'set': the new limit."
        )

    def handle(
        self, *args: Any, action: str, name: str, max_concurrency: int | None, **options: Any
    ) -> None:
        if (action == "set") != (max_concurrency is not None):
            raise CommandError("Give a max_concurrency with 'set', and only with 'set'.")
        choices: dict[str, dict[str, Any]] = {
            "pause": {"paused": True},
            "resume": {"paused": False},
            "set": {"max_concurrency": max_concurrency},
            "reset": {"paused": None, "max_concurrency": None},
        }
        try:
            change_queue(name, **choices[action])
        except ValueError as error:
            raise CommandError(str(error)) from None
        limits = QueueLimits.of(name)
        limit = "paused" if limits.max_concurrency == 0 else limits.max_concurrency or "unset"
        self.stdout.write(
            f"Queue {name!r}: max_concurrency {limit} ({limits.source or 'default'})."
        )
