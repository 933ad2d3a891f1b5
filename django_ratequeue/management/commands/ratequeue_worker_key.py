"""``manage.py ratequeue_worker_key``: create, list and revoke the API keys of remote workers.

``create NAME --queues Q [Q ...] | list | revoke PREFIX`` (docs/remote-workers.md). A
key is shown once, when it is created: only its SHA-256 and its prefix are stored."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_ratequeue.jobs import create_key, revoke
from django_ratequeue.models import WorkerKey


class Command(BaseCommand):
    help = "Create, list or revoke the API keys of remote workers."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="A new key; printed once.")
        create.add_argument("name", help="Who or what uses it.")
        create.add_argument(
            "--queues", nargs="+", required=True, help="The remote queues it may claim from."
        )
        actions.add_parser("list", help="Every key: prefix, name, queues, last seen.")
        revoke_parser = actions.add_parser("revoke", help="Stop a key at once.")
        revoke_parser.add_argument("prefix", help="The key's prefix (its first 8 characters).")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action == "create":
            try:
                row, key = create_key(options["name"], options["queues"])
            except ValueError as error:
                raise CommandError(str(error)) from None
            self.stderr.write(
                f"Key {row.prefix} for {row.name!r} ({', '.join(row.queues)}); it is shown "
                "only now:"
            )
            self.stdout.write(key)
        elif action == "list":
            for row in WorkerKey.objects.order_by("created_at"):
                state = f"revoked {row.revoked_at:%Y-%m-%d %H:%M}" if row.revoked_at else "active"
                seen = f"{row.last_seen:%Y-%m-%d %H:%M:%S}" if row.last_seen else "never"
                self.stdout.write(
                    f"{row.prefix}  {row.name}  queues={','.join(row.queues)}  {state}  "
                    f"last seen {seen}{f' from {row.last_host}' if row.last_host else ''}"
                )
        elif not revoke(options["prefix"]):
            raise CommandError(f"No active key has the prefix {options['prefix']!r}.")
        else:
            self.stdout.write(f"Revoked {options['prefix']}.")
