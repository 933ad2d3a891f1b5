"""``manage.py ratelimits``: list, show, reset and prune the rate limits.

List the rate limits, show one's values now, reset them, prune the rows that are full
again."""

from __future__ import annotations

from argparse import ArgumentParser
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Count

from django_ratequeue import clock
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.ratelimit.config import LimitConfig
from django_ratequeue.ratelimit.decisions import project_row_value, reset_rate_limit
from django_ratequeue.ratelimit.models import RateLimitState
from django_ratequeue.ratelimit.prune import BATCH_SIZE, prune_all_full_rows
from django_ratequeue.ratelimit.status import config_for, describe


class Command(BaseCommand):
    help = (
        "List the rate limits, show the values one holds now, reset it, or prune the rows "
        "that are full again."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        actions.add_parser("list", help="configured limits and their stored rows")
        show = actions.add_parser("show", help="a limit's values now, per key and shard")
        show.add_argument("name")
        show.add_argument("--key", help="only this key (default: every stored key)")
        reset = actions.add_parser("reset", help="reset a limit to full")
        reset.add_argument("name")
        which = reset.add_mutually_exclusive_group()
        which.add_argument("--key", help="the key to reset (default: the limit without key)")
        which.add_argument("--all-keys", action="store_true", help="reset every key, after asking")
        reset.add_argument(
            "--no-input", "--noinput", action="store_false", dest="interactive",
            help="do not ask for confirmation",
        )  # fmt: skip
        prune = actions.add_parser(
            "prune", help="delete the rows that are full again (a missing row is a full limit)"
        )
        prune.add_argument(
            "--batch-size", type=int, default=BATCH_SIZE, help="rows deleted per transaction"
        )

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action == "list":
            self.list_limits()
        elif action == "show":
            self.show(options["name"], options["key"])
        elif action == "prune":
            self.prune(options["batch_size"])
        else:
            self.reset(
                options["name"], options["key"], options["all_keys"], options["interactive"]
            )

    def list_limits(self) -> None:
        stored = dict(
            RateLimitState.objects.values_list("name").annotate(rows=Count("id")).order_by()
        )
        configured = ratequeue_settings().RATE_LIMITS
        if not configured and not stored:
            self.stdout.write("No rate limits are configured or stored.")
            return
        table = [("NAME", "LIMIT", "STORED ROWS")] + [
            (name, describe(configured.get(name)), str(stored.get(name, 0)))
            for name in sorted(configured.keys() | stored.keys())
        ]
        widths = [max(len(row[column]) for row in table) for column in range(2)]
        for name, limit, rows in table:
            self.stdout.write(f"{name:{widths[0]}}  {limit:{widths[1]}}  {rows}")

    def show(self, name: str, key: str | None) -> None:
        limit = self.known_config(name)
        rows = RateLimitState.objects.filter(name=name).order_by("key", "shard")
        if key is not None:
            rows = rows.filter(key=key)
        self.stdout.write(f"{name}: {describe(limit)}")
        now = clock.now()
        if not rows:
            self.stdout.write("  nothing stored: the limit is full")
        for row in rows:
            # A keyed limit's rows each under their key's config (None: its function failed).
            config = config_for(name, key=row.key or None) if limit else None
            projected = None if config is None else project_row_value(row, config, now.timestamp())
            value = (
                f"{projected:.2f} now"
                if projected is not None
                else f"{row.value:.2f} stored at ts"
            )
            updated = datetime.fromtimestamp(row.ts, tz=UTC).isoformat(timespec="seconds")
            self.stdout.write(
                f"  key {row.key or '(none)'!s}  shard {row.shard}  {value}  (ts {updated})"
            )

    def reset(self, name: str, key: str | None, all_keys: bool, interactive: bool) -> None:
        self.known_config(name)
        if not all_keys:
            reset_rate_limit(name, key=key)
            self.stdout.write(f"Reset {name!r}" + (f" for key {key!r}." if key else "."))
            return
        rows = RateLimitState.objects.filter(name=name)
        keys = rows.values("key").distinct().count()
        if interactive:
            answer = input(f"Reset all {keys} stored key(s) of {name!r}? Type 'yes' to continue: ")
            if answer != "yes":
                raise CommandError("Reset cancelled.")
        reset_rate_limit(name, all_keys=True)
        self.stdout.write(f"Reset {keys} key(s) of {name!r}.")

    def prune(self, batch_size: int) -> None:
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1.")
        count = prune_all_full_rows(batch_size)
        self.stdout.write(
            f"Pruned {count} full rate-limit row{'s' if count != 1 else ''} "
            "(limits in RATE_LIMITS only)."
        )

    def known_config(self, name: str) -> LimitConfig | None:
        """Return the limit's configuration; ``None`` for a name only stored (an inline config)."""
        config = ratequeue_settings().RATE_LIMITS.get(name)
        if config is None and not RateLimitState.objects.filter(name=name).exists():
            known = ", ".join(sorted(ratequeue_settings().RATE_LIMITS)) or "none"
            raise CommandError(
                f"Unknown rate limit {name!r}: it is neither in RATEQUEUE['RATE_LIMITS'] "
                f"(configured: {known}) nor stored."
            )
        return config
