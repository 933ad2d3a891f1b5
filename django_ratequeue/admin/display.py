"""Show long values and times in little width in the admin's lists.

The rest of the value, or the full time, goes in the tooltip."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone
from django.utils.dateformat import format as format_date
from django.utils.html import format_html
from django.utils.safestring import SafeString


def shortened(full: str, shown: str) -> SafeString | str:
    """Return ``shown`` with the full value as its tooltip, when they differ."""
    if shown == full:
        return full
    return format_html('<span title="{}">{}</span>', full, shown)


def moment(value: datetime | None, now: datetime | None = None) -> SafeString | str:
    """Return a time in little width, with the full time in its tooltip.

    The time of day if it is today, the day and the minute if it is this year, else the
    date."""
    if value is None:
        return "-"
    local = timezone.localtime(value)
    today = timezone.localtime(now or timezone.now()).date()
    if local.date() == today:
        shown = format_date(local, "H:i:s")
    elif local.year == today.year:
        shown = format_date(local, "M j, H:i")
    else:
        shown = format_date(local, "Y-m-d")
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        value.isoformat(),
        format_date(local, "Y-m-d H:i:s T"),
        shown,
    )
