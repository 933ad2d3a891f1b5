"""``manage.py ratequeue_failed``: list, retry or discard failed jobs, by group.

Without an option it lists the groups of failed jobs not retried yet (function and
exception class); ``--retry`` or ``--discard`` act on the groups ``--function`` and
``--exception`` select (all of them when neither is given). A retry copies each job once,
as the admin's does (:mod:`django_ratequeue.failed`)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_ratequeue import failed
from django_ratequeue.monitor.failures import failed_jobs, failure_groups


class Command(BaseCommand):
    help = (
        "List the failed jobs not retried yet by function and exception class; with "
        "--retry or --discard, retry (each job once) or delete the ones selected."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        act = parser.add_mutually_exclusive_group()
        act.add_argument("--retry", action="store_true", help="Retry the selected jobs.")
        act.add_argument("--discard", action="store_true", help="Delete the selected jobs.")
        parser.add_argument("--function", help="Only the jobs of this dotted path.")
        parser.add_argument(
            "--exception", help="Only the jobs that raised this class, e.g. builtins.ValueError."
        )

    def handle(
        self,
        *args: Any,
        retry: bool,
        discard: bool,
        function: str | None,
        exception: str | None,
        **options: Any,
    ) -> None:
        if not (retry or discard):
            self.list_groups()
        elif retry:
            self.retry(function, exception)
        else:
            self.discard(function, exception)

    def list_groups(self) -> None:
        """Write a line per group: its jobs, function, exception and last failure."""
        groups = failure_groups()
        if not groups:
            self.stdout.write("No failed job is waiting for a decision.")
        for group in groups:
            last = f"{group.last_failed_at:%Y-%m-%d %H:%M:%S}" if group.last_failed_at else "-"
            self.stdout.write(
                f"{group.jobs:>7}  {group.func}  {group.exception_class_path or '-'}"
                f"  last {last}  {group.last_error}"
            )

    def retry(self, function: str | None, exception: str | None) -> None:
        """Retry each selected job once; report what was enqueued and what was not."""
        enqueued = already = refused = 0
        for job in failed_jobs(function, exception).order_by("finished_at").iterator():
            try:
                done = failed.retry(job)
            except (TypeError, ValueError) as exc:
                refused += 1
                self.stderr.write(f"Could not retry {job.pk}: {exc}")
                continue
            enqueued += done.enqueued
            already += not done.enqueued
        self.stdout.write(f"Retried {enqueued} job(s); {already} had been retried before.")
        if refused:
            raise CommandError(f"{refused} job(s) could not be retried.")

    def discard(self, function: str | None, exception: str | None) -> None:
        """Delete the selected jobs, a thousand at a time."""
        total = 0
        while ids := list(failed_jobs(function, exception).values_list("pk", flat=True)[:1000]):
            deleted = failed.discard(ids)
            if not deleted:  # gone meanwhile (retention)
                break
            total += deleted
        self.stdout.write(f"Discarded {total} failed job(s).")
