"""The attempts of a job drawn as an SVG timeline, for its admin page.

Pure functions of the attempts and the time: no query, no template, no JavaScript, so
that the page draws it server-side and the live view redraws it the same way. Every text
from the database is escaped. docs/admin.md ("The job page") tells what it draws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from django_ratequeue.admin.attemptwords import duration, outcome_label, summary
from django_ratequeue.admin.jobfields import time_of_day
from django_ratequeue.jobs import AttemptInfo
from django_ratequeue.models import Outcome

# The most attempts drawn: the latest ones (a job may retry dozens of times; the table
# lists them all).
MAX_DRAWN = 12
# The drawing's coordinates (the SVG scales to its container's width).
WIDTH = 760
LABEL_WIDTH = 44
OUTCOME_WIDTH = 150
AXIS_HEIGHT = 26
ROW_HEIGHT = 26
BAR_HEIGHT = 12
# The thinnest bar drawn: a zero-length span stays visible.
MIN_BAR = 2.0
# A back-off label is written over its line only when the line is at least this long.
MIN_LABEL_WIDTH = 56
# Error texts in tooltips are cut to this many characters.
TOOLTIP_LENGTH = 200
# Tick spacings to choose from, in seconds: the first giving at most MAX_TICKS ticks.
TICK_STEPS = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5,
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800,
    3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800,
)  # fmt: skip
MAX_TICKS = 7
# A tick label's width per character, at the axis's 10 px (wider than most digits), and
# the room left between two labels: a label that would come closer is left out.
TICK_CHAR_WIDTH = 6.2
TICK_GAP = 8.0

# The CSS class of a run bar, by outcome ("" while running).
OUTCOME_CLASS = {
    "": "running",
    Outcome.SUCCEEDED: "succeeded",
    Outcome.FAILED: "failed",
    Outcome.NON_RETRYABLE: "failed",
    Outcome.TIMED_OUT: "timed-out",
    Outcome.WORKER_LOST: "lost",
}


@dataclass(frozen=True)
class Scale:
    """Map times to x coordinates over the plot area."""

    start: datetime
    seconds: float
    left: float = LABEL_WIDTH
    right: float = WIDTH - OUTCOME_WIDTH

    def x(self, moment: datetime) -> float:
        offset = (moment - self.start).total_seconds()
        return round(self.left + (self.right - self.left) * offset / self.seconds, 1)


def tick_step(seconds: float) -> float:
    for step in TICK_STEPS:
        if seconds / step <= MAX_TICKS:
            return step
    return TICK_STEPS[-1]


def tick_label(offset: float, step: float) -> str:
    """Return a tick's distance from the first dispatch, in the unit its spacing suggests."""
    if offset == 0:
        return "0"
    if step < 1:
        return f"+{offset * 1000:.0f} ms" if offset < 1 else f"+{offset:.3g} s"
    if step < 60:
        return f"+{offset:g} s"
    if step < 3600:
        return f"+{offset / 60:g} min"
    if step < 86400:
        return f"+{offset / 3600:g} h"
    return f"+{offset / 86400:g} d"


def _ends(attempt: AttemptInfo, now: datetime) -> tuple[datetime, datetime | None, datetime]:
    """Return the attempt's dispatch, start and end as drawn.

    An open span ends ``now``; a start or end recorded before the dispatch (clocks of
    different hosts) is moved to it."""
    dispatched = attempt.dispatched_at
    started = None if attempt.started_at is None else max(attempt.started_at, dispatched)
    ended = attempt.ended_at or max(now, started or dispatched)
    return dispatched, started, max(ended, started or dispatched)


def _text(x: float, y: float, text: str, css: str, anchor: str = "start") -> SafeString:
    return format_html(
        '<text x="{}" y="{}" class="{}" text-anchor="{}">{}</text>', x, y, css, anchor, text
    )


def _bar(x0: float, x1: float, y: float, css: str, tooltip: str) -> SafeString:
    width = max(x1 - x0, MIN_BAR)
    return format_html(
        '<rect x="{}" y="{}" width="{}" height="{}" class="{}"><title>{}</title></rect>',
        round(x0, 1),
        y,
        round(width, 1),
        BAR_HEIGHT,
        css,
        tooltip,
    )


def _backoff(x0: float, x1: float, y: float, seconds: float, tooltip: str) -> list[SafeString]:
    """Draw a dashed line from the previous end to this dispatch, labelled with its length."""
    mid = y + BAR_HEIGHT / 2
    parts = [
        format_html(
            '<line x1="{}" y1="{}" x2="{}" y2="{}" class="rq-backoff"><title>{}</title></line>',
            x0,
            mid,
            max(x1, x0 + 1),
            mid,
            tooltip,
        )
    ]
    if x1 - x0 >= MIN_LABEL_WIDTH:
        parts.append(_text((x0 + x1) / 2, y - 2, duration(seconds), "rq-label", "middle"))
    return parts


def _cut(text: str) -> str:
    return text if len(text) <= TOOLTIP_LENGTH else f"{text[: TOOLTIP_LENGTH - 1]}…"


def _row(attempt: AttemptInfo, y: float, scale: Scale, now: datetime) -> list[SafeString]:
    """Draw one attempt: its wait for a runner, its run, and its outcome written at the end."""
    dispatched, started, ended = _ends(attempt, now)
    parts = [_text(LABEL_WIDTH - 8, y + BAR_HEIGHT - 2, f"#{attempt.number}", "rq-label", "end")]
    waited_until = started or ended
    waited = (waited_until - dispatched).total_seconds()
    parts.append(
        _bar(
            scale.x(dispatched),
            scale.x(waited_until),
            y,
            "rq-wait" if started or not attempt.ended_at else "rq-wait rq-unstarted",
            f"Attempt {attempt.number}: dispatched at {time_of_day(dispatched)}, "
            f"waited {duration(waited)} for a runner",
        )
    )
    label = outcome_label(attempt)
    if started is not None:
        ran = (ended - started).total_seconds()
        tooltip = (
            f"Attempt {attempt.number}: ran {duration(ran)} from {time_of_day(started)}, {label}"
        )
        if attempt.error:
            tooltip += f": {_cut(attempt.error)}"
        css = "rq-run rq-" + OUTCOME_CLASS.get(attempt.outcome, "failed")
        parts.append(_bar(scale.x(started), scale.x(ended), y, css, tooltip))
        label = f"{label}, {duration(ran)}"
    parts.append(_text(scale.right + 8, y + BAR_HEIGHT - 2, label, "rq-outcome"))
    return parts


def _axis(scale: Scale, bottom: float) -> list[SafeString]:
    """Draw ticks at round distances from the first dispatch, with its clock time at 0."""
    step = tick_step(scale.seconds)
    parts = [
        format_html(
            '<line x1="{}" y1="{}" x2="{}" y2="{}" class="rq-axis"/>',
            scale.left,
            AXIS_HEIGHT - 6,
            scale.right,
            AXIS_HEIGHT - 6,
        )
    ]
    count = int(scale.seconds / step + 1e-9)
    free_from = -math.inf  # where the last label drawn ends
    for n in range(count + 1):
        offset = n * step
        x = scale.left + (scale.right - scale.left) * offset / scale.seconds
        label = time_of_day(scale.start) if n == 0 else tick_label(offset, step)
        anchor = "start" if n == 0 else ("end" if x > scale.right - 30 else "middle")
        parts.append(
            format_html(
                '<line x1="{x}" y1="{top}" x2="{x}" y2="{bottom}" class="rq-grid"/>',
                x=round(x, 1),
                top=AXIS_HEIGHT - 6,
                bottom=bottom,
            )
        )
        left, right = _label_span(x, len(label), anchor)
        if left >= free_from:
            parts.append(_text(round(x, 1), AXIS_HEIGHT - 11, label, "rq-tick", anchor))
            free_from = right + TICK_GAP
    return parts


def _label_span(x: float, characters: int, anchor: str) -> tuple[float, float]:
    """Return where a tick label anchored at ``x`` starts and ends, at most."""
    width = characters * TICK_CHAR_WIDTH
    start = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
    return start, start + width


def render(
    attempts: Sequence[AttemptInfo],
    now: datetime,
    next_start: datetime | None = None,
    max_drawn: int = MAX_DRAWN,
) -> SafeString:
    """Return the SVG of ``attempts`` (in order) as of ``now``.

    ``next_start``: when the job's next attempt is due, if it waits to retry. Only the
    latest ``max_drawn`` attempts are drawn, and a line under the drawing says how many
    earlier ones are not."""
    if not attempts:
        return mark_safe("")
    drawn = list(attempts[-max_drawn:])
    hidden = len(attempts) - len(drawn)
    # The end of the last attempt not drawn: the back-off after it is.
    previous_end = attempts[-max_drawn - 1].ended_at if hidden else None
    start = min(drawn[0].dispatched_at, previous_end or drawn[0].dispatched_at)
    last = max(_ends(a, now)[2] for a in drawn)
    if next_start is not None:
        last = max(last, next_start)
    scale = Scale(start, max((last - start).total_seconds(), 0.001))
    rows = len(drawn) + (next_start is not None)
    height = AXIS_HEIGHT + rows * ROW_HEIGHT + 4
    parts = _axis(scale, height - 4)
    parts += _rows(drawn, previous_end, scale, now)
    if next_start is not None:
        since = drawn[-1].ended_at or now
        parts += _next_row(len(drawn), since, next_start, scale)
    if any(a.ended_at is None for a in drawn) or next_start is not None:
        parts.append(_now_line(scale.x(now), height, now))
    svg = _svg(parts, height, len(drawn), summary(attempts, next_start))
    if hidden:
        note = format_html(
            '<p class="help rq-hidden-attempts">The {} earlier attempts are not drawn; the '
            "table below lists them all.</p>",
            hidden,
        )
        return SafeString(svg + note)
    return svg


def _row_top(row: int) -> float:
    return AXIS_HEIGHT + row * ROW_HEIGHT + (ROW_HEIGHT - BAR_HEIGHT) / 2


def _rows(
    drawn: list[AttemptInfo], previous_end: datetime | None, scale: Scale, now: datetime
) -> list[SafeString]:
    """Return a row per attempt, each after the back-off that preceded it, if any."""
    parts: list[SafeString] = []
    for n, attempt in enumerate(drawn):
        y = _row_top(n)
        if previous_end is not None and attempt.dispatched_at > previous_end:
            seconds = (attempt.dispatched_at - previous_end).total_seconds()
            parts += _backoff(
                scale.x(previous_end),
                scale.x(attempt.dispatched_at),
                y,
                seconds,
                f"Back-off of {duration(seconds)} before attempt {attempt.number}",
            )
        parts += _row(attempt, y, scale, now)
        previous_end = attempt.ended_at
    return parts


def _next_row(row: int, since: datetime, next_start: datetime, scale: Scale) -> list[SafeString]:
    """Return the row of the back-off from ``since`` to the next attempt, due at ``next_start``."""
    y = _row_top(row)
    seconds = (next_start - since).total_seconds()
    return [
        _text(LABEL_WIDTH - 8, y + BAR_HEIGHT - 2, "next", "rq-label", "end"),
        *_backoff(
            scale.x(since),
            scale.x(next_start),
            y,
            seconds,
            f"Back-off of {duration(seconds)}: next attempt at {time_of_day(next_start)}",
        ),
        _text(scale.right + 8, y + BAR_HEIGHT - 2, f"due {time_of_day(next_start)}", "rq-outcome"),
    ]


def _now_line(x: float, height: int, now: datetime) -> SafeString:
    """Return the vertical line that marks ``now``."""
    return format_html(
        '<line x1="{x}" y1="{top}" x2="{x}" y2="{bottom}" class="rq-now">'
        "<title>now, {clock}</title></line>",
        x=x,
        top=AXIS_HEIGHT - 6,
        bottom=height - 4,
        clock=time_of_day(now),
    )


def _svg(parts: list[SafeString], height: int, rows: int, described: str) -> SafeString:
    """Return the drawing's ``<svg>`` element around ``parts``, with its title and summary."""
    return format_html(
        '<svg class="rq-timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" '
        'width="{w}" height="{h}" role="img" '
        'aria-labelledby="rq-timeline-title rq-timeline-desc" '
        'data-rows="{}"><title id="rq-timeline-title">Timeline of the attempts</title>'
        '<desc id="rq-timeline-desc">{}</desc>{}</svg>',
        rows,
        described,
        mark_safe("".join(parts)),  # each part escaped what it holds
        w=WIDTH,
        h=height,
    )


def legend() -> SafeString:
    """Return what the colours mean, as text beside the drawing."""
    keys = [
        ("rq-wait", "waiting for a runner"),
        ("rq-run rq-running", "running"),
        ("rq-run rq-succeeded", "succeeded"),
        ("rq-run rq-failed", "failed"),
        ("rq-run rq-timed-out", "timed out"),
        ("rq-run rq-lost", "worker lost"),
        ("rq-backoff-key", "back-off"),
    ]
    items = "".join(
        format_html(
            '<li><svg width="14" height="10" aria-hidden="true"><rect width="14" height="10" '
            'class="{}"/></svg> {}</li>',
            css,
            text,
        )
        for css, text in keys
    )
    return format_html('<ul class="rq-legend">{}</ul>', mark_safe(items))
