"""The job list: its columns, its filters and its count, each bounded.

Long values are cut short and times are short (whole in their tooltips, see
:mod:`.display`), so that the list fits a laptop's screen beside the admin's sidebar;
the count and the queue filter read no more than the queue overview does. docs/admin.md
("Jobs") tells what the list shows.
"""

from __future__ import annotations

import re
from typing import Any, cast
from urllib.parse import urlencode

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from django_ratequeue.admin.display import moment
from django_ratequeue.jobs import Status
from django_ratequeue.models import FINAL_STATUSES, Job
from django_ratequeue.monitor import counts

# The statuses whose job waits for its start_at, shown under the status.
WAITS_FOR_START = (Status.SCHEDULED, Status.RETRYING)
KEY_SHOWN = 16


class CappedCountPaginator(Paginator):
    """Count at most COUNT_LIMIT + 1 jobs; the list says so under its count.

    A full ``COUNT(*)`` would read the whole history on every load of the list."""

    @cached_property
    def count(self) -> int:
        jobs = cast("QuerySet[Job]", self.object_list)
        return jobs[: counts.COUNT_LIMIT + 1].count()

    @property
    def capped(self) -> bool:
        return self.count > counts.COUNT_LIMIT

    @property
    def limit(self) -> int:
        return counts.COUNT_LIMIT


class QueueFilter(admin.SimpleListFilter):
    """Filter by queue, listing the queues without a ``SELECT DISTINCT`` over every job."""

    title = "queue"
    parameter_name = "queue__exact"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in counts.queue_names()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        chosen = self.value()
        return queryset if chosen is None else queryset.filter(queue=chosen)


class ConcurrencyKeyFilter(admin.SimpleListFilter):
    """Filter by one concurrency key, reached by clicking a key in the list.

    Keys are often per user, so listing every distinct key in the sidebar would not scale;
    the sidebar only shows the key chosen.
    """

    title = "concurrency key"
    parameter_name = "concurrency_key"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        chosen = self.value()
        return [(chosen, chosen)] if chosen else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        chosen = self.value()
        return queryset if chosen is None else queryset.filter(concurrency_key=chosen)


def wrappable(dotted: str) -> SafeString:
    """Return a dotted path, escaped, that may wrap after each dot and underscore."""
    breaks = re.split(r"(?<=[._])", dotted)
    return format_html_join(SafeString("<wbr>"), "{}", ((part,) for part in breaks if part))


# The job list's columns: the display methods of JobListColumns and the queue.
LIST_DISPLAY = ("short_id", "function", "queue", "key", "state", "attempts", "created")


class JobListColumns:
    """The job list's columns (LIST_DISPLAY), mixed into :class:`.jobs.JobAdmin`."""

    @admin.display(description="id", ordering="id")
    def short_id(self, job: Job) -> str:
        """Show the whole id (it wraps anywhere): a cut one names no job."""
        return job.id

    @admin.display(description="function", ordering="func")
    def function(self, job: Job) -> SafeString:
        shown = wrappable(".".join(job.func.split(".")[-2:]))
        return format_html('<span title="{}">{}</span>', job.func, shown)

    @admin.display(description="concurrency key", ordering="concurrency_key")
    def key(self, job: Job) -> SafeString | str:
        if not job.concurrency_key:
            return ""
        url = reverse("admin:django_ratequeue_job_changelist")
        full = job.concurrency_key
        shown = full if len(full) <= KEY_SHOWN else f"{full[: KEY_SHOWN - 1]}…"
        query = urlencode({"concurrency_key": full})
        return format_html('<a href="{}?{}" title="{}">{}</a>', url, query, full, shown)

    @admin.display(description="status", ordering="status")
    def state(self, job: Job) -> SafeString:
        """Show the status and, under it, its time.

        That is when a final job ended, when a scheduled or retrying one starts."""
        status = job.get_status_display()
        if job.status in FINAL_STATUSES:
            when = format_html("at {}", moment(job.finished_at))
        elif job.status in WAITS_FOR_START:
            when = format_html("from {}", moment(job.start_at))
        else:
            return format_html("{}", status)
        return format_html('{}<br><span class="help">{}</span>', status, when)

    @admin.display(description="created", ordering="created_at")
    def created(self, job: Job) -> SafeString | str:
        return moment(job.created_at)
