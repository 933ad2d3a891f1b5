"""``manage.py ratequeue_queue``: change a queue's limits, or MAX_CONCURRENCY, at runtime.

``pause|resume|set|total|reset NAME [N]`` change a queue's limits (they override
RATEQUEUE["QUEUES"]; the loop applies them at once); ``max-concurrency N|reset`` does
the same for MAX_CONCURRENCY."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_ratequeue.control import change_queue, set_max_concurrency
from django_ratequeue.jobs import QueueLimits, environment_limit


class Command(BaseCommand):
    help = (
        "Pause or resume a queue, set its max_concurrency or total_concurrency, or reset it "
        "to the settings; or set MAX_CONCURRENCY (max-concurrency N|reset); without a deploy."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "action", choices=["pause", "resume", "set", "total", "reset", "max-concurrency"]
        )
        parser.add_argument(
            "name", help="The queue's name; for 'max-concurrency': the limit, or 'reset'."
        )
        parser.add_argument(
            "limit", nargs="?", type=int, help="For 'set' and 'total': the new limit."
        )

    def handle(
        self, *args: Any, action: str, name: str, limit: int | None, **options: Any
    ) -> None:
        if action == "max-concurrency":
            self.change_environment(name)
            return
        if (action in ("set", "total")) != (limit is not None):
            raise CommandError("Give a limit with 'set' and 'total', and only with them.")
        choices: dict[str, dict[str, Any]] = {
            "pause": {"paused": True},
            "resume": {"paused": False},
            "set": {"max_concurrency": limit},
            "total": {"total_concurrency": limit},
            "reset": {"paused": None, "max_concurrency": None, "total_concurrency": None},
        }
        try:
            change_queue(name, **choices[action])
        except ValueError as error:
            raise CommandError(str(error)) from None
        limits = QueueLimits.of(name)
        shown = "paused" if limits.max_concurrency == 0 else limits.max_concurrency or "unset"
        total = limits.total_concurrency or "no cap"
        self.stdout.write(
            f"Queue {name!r}: max_concurrency {shown} ({limits.source or 'default'}), "
            f"total_concurrency {total}."
        )

    def change_environment(self, value: str) -> None:
        if value == "reset":
            limit = None
        else:
            try:
                limit = int(value)
            except ValueError:
                raise CommandError(f"Give a number or 'reset', not {value!r}.") from None
        try:
            set_max_concurrency(limit)
        except ValueError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"MAX_CONCURRENCY {environment_limit()}.")
