"""Line charts as server-rendered SVG: no script, no CDN, and every text escaped.

:func:`line_chart` draws series of numbers over time buckets, with a title and a
description in words, a legend and the numbers as a table for screen readers, in the
admin's colours (``static/ratequeue/dashboard.css``). docs/admin.md ("The dashboard")
tells what the charts show and how they read without colour or sight.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from functools import lru_cache
from typing import Literal

from django.utils import timezone
from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import SafeString

WIDTH, HEIGHT = 480, 200
# The plot area inside the SVG: room on the left for the y labels, below for the times.
LEFT, RIGHT, TOP, BOTTOM = 60, 10, 12, 26
# What the numbers are: counts per bucket (summed), levels (a depth), or seconds.
Kind = Literal["count", "level", "seconds"]
# At most this many series in one chart (each its own class and dash pattern).
MAX_SERIES = 3


@dataclass(frozen=True)
class Series:
    """One line: its name and a value per bucket (None: no value in that bucket)."""

    label: str
    values: Sequence[float | None]


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def number(value: float | None, kind: Kind = "count") -> str:
    """Return a value for people, short: ``950``, ``12.5k``, ``3.1M``, ``2.5e+12``, ``0.25 s``."""
    if type(value) is int and kind != "seconds" and -1000 < value < 1000:
        return str(value)  # most cells of a page: a small count, shown as it is
    if value is None or not math.isfinite(value):
        return "-"
    unit = " s" if kind == "seconds" else ""
    magnitude = abs(value)
    if magnitude >= 1e9:
        return f"{value:.2g}{unit}"
    for size, suffix in ((1e6, "M"), (1e3, "k")):
        if magnitude >= size:
            return f"{value / size:.3g}{suffix}{unit}"
    if kind == "seconds" or not float(value).is_integer():
        return f"{value:.3g}{unit}"
    return f"{int(value)}{unit}"


def _clock(moment: datetime) -> str:
    """Return the time of day in the current time zone, e.g. "14:05"."""
    return _clock_in(moment, timezone.get_current_timezone())


@lru_cache(maxsize=4096)
def _clock_in(moment: datetime, zone: tzinfo) -> str:
    # A page shows the same few dozen times in each of its charts.
    return timezone.localtime(moment, zone).strftime("%H:%M")


def summary(title: str, series: Sequence[Series], kind: Kind) -> str:
    """Return the chart in words, for its ``<desc>``.

    Per series, its total or its latest value, and its peak."""
    parts = []
    for line in series:
        values = [v for v in map(_finite, line.values) if v is not None]
        if not values:
            parts.append(f"{line.label}: no data")
        elif kind == "count":
            parts.append(
                f"{line.label}: {number(sum(values))} in all, "
                f"at most {number(max(values))} per interval"
            )
        else:
            parts.append(
                f"{line.label}: {number(values[-1], kind)} at the end, "
                f"at most {number(max(values), kind)}"
            )
    return f"{title}. " + "; ".join(parts) + "." if parts else f"{title}: no data."


def _scale(series: Sequence[Series]) -> float:
    """Return the top of the y axis: the largest value, rounded up.

    It is rounded up to 1, 2 or 5 times a power of ten (1 when every value is zero or
    missing)."""
    peak = max(
        (v for line in series for v in map(_finite, line.values) if v is not None), default=0.0
    )
    if peak <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(peak))
    for step in (1, 2, 5, 10):
        if peak <= step * power:
            return float(step * power)
    return float(10 * power)  # pragma: no cover - peak <= 10 * power always


@lru_cache(maxsize=64)
def _xs(buckets: int) -> tuple[str, ...]:
    """Return the x of each bucket's middle, formatted: the same in every chart of a window."""
    plot_w = WIDTH - LEFT - RIGHT
    return tuple(f"{LEFT + plot_w * (i + 0.5) / buckets:.1f}" for i in range(buckets))


def _segments(values: Sequence[float | None], top: float, buckets: int) -> list[list[str]]:
    """Return the polyline points of each unbroken run of values (a missing value breaks it)."""
    plot_h = HEIGHT - TOP - BOTTOM
    xs = _xs(buckets)
    runs: list[list[str]] = [[]]
    for x, value in zip(xs, values, strict=False):
        value = _finite(value)
        if value is None:
            runs.append([])
            continue
        y = TOP + plot_h * (1 - min(max(value, 0.0), top) / top)
        runs[-1].append(f"{x},{y:.1f}")
    return [run for run in runs if run]


def _line(index: int, values: Sequence[float | None], top: float, buckets: int) -> SafeString:
    marks = []
    for run in _segments(values, top, buckets):
        if len(run) == 1:  # a lone value: a dot, a line needs two points
            x, y = run[0].split(",")
            marks.append(format_html('<circle cx="{}" cy="{}" r="2.5"></circle>', x, y))
        else:
            marks.append(format_html('<polyline points="{}"></polyline>', " ".join(run)))
    return format_html('<g class="rq-series rq-s{}">{}</g>', index, SafeString("".join(marks)))


def _axes(top: float, starts: Sequence[datetime], kind: Kind) -> SafeString:
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    grid = []
    for fraction in (0.0, 0.5, 1.0):
        y = TOP + plot_h * (1 - fraction)
        grid.append(
            format_html(
                '<line class="rq-grid" x1="{}" x2="{}" y1="{}" y2="{}"></line>'
                '<text class="rq-label" x="{}" y="{}" text-anchor="end">{}</text>',
                LEFT,
                WIDTH - RIGHT,
                f"{y:.1f}",
                f"{y:.1f}",
                LEFT - 6,
                f"{y + 4:.1f}",
                number(top * fraction, kind),
            )
        )
    if starts:
        picks = sorted({0, len(starts) // 2, len(starts) - 1})
        for i in picks:
            x = LEFT + plot_w * (i + 0.5) / len(starts)
            anchor = (
                "start"
                if i == 0 and len(picks) > 1
                else "end"
                if i == picks[-1] and i
                else "middle"
            )
            grid.append(
                format_html(
                    '<text class="rq-label" x="{}" y="{}" text-anchor="{}">{}</text>',
                    f"{x:.1f}",
                    HEIGHT - 6,
                    anchor,
                    _clock(starts[i]),
                )
            )
    return SafeString("".join(grid))


def _table(
    title: str, starts: Sequence[datetime], series: Sequence[Series], kind: Kind
) -> SafeString:
    """Return the numbers as a table, for screen readers.

    Hidden in a box of its own: a table does not shrink to ``.visually-hidden``'s one
    pixel, and its rows would lengthen the page.

    Built by joining strings (a day's chart has hundreds of cells): the labels and the
    title are escaped, the times and numbers are made here of digits, letters and signs
    only."""
    head = "".join(f'<th scope="col">{escape(line.label)}</th>' for line in series)
    zone = timezone.get_current_timezone()
    cells = [[f"<td>{number(value, kind)}</td>" for value in line.values] for line in series]
    rows = "".join(
        f'<tr><th scope="row">{_clock_in(start, zone)}</th>{"".join(row)}</tr>'
        for start, *row in zip(starts, *cells, strict=True)
    )
    return format_html(
        '<div class="visually-hidden"><table><caption>{}</caption>'
        '<thead><tr><th scope="col">from</th>{}</tr></thead><tbody>{}</tbody></table></div>',
        title,
        SafeString(head),
        SafeString(rows),
    )


def line_chart(
    chart_id: str,
    title: str,
    starts: Sequence[datetime],
    series: Sequence[Series],
    kind: Kind = "count",
) -> SafeString:
    """Return a ``<figure>`` with the SVG chart of ``series``, its legend and its data table.

    ``series`` has one value per bucket of ``starts``. ``chart_id`` must be unique in
    the page (it names the title and description); every other argument may hold
    anything, it is escaped."""
    _check(starts, series)
    top = _scale(series)
    buckets = max(len(starts), 1)
    lines = SafeString(
        "".join(_line(i + 1, line.values, top, buckets) for i, line in enumerate(series))
    )
    return format_html(
        '<figure class="rq-chart">'
        '<svg viewBox="0 0 {} {}" role="img" aria-labelledby="{}-title {}-desc" '
        'preserveAspectRatio="xMidYMid meet">'
        '<title id="{}-title">{}</title><desc id="{}-desc">{}</desc>{}{}</svg>'
        '<figcaption><span class="rq-chart-title">{}</span><ul class="rq-legend">{}</ul>'
        "</figcaption>{}</figure>",
        WIDTH,
        HEIGHT,
        chart_id,
        chart_id,
        chart_id,
        title,
        chart_id,
        summary(title, series, kind),
        _axes(top, starts, kind),
        lines,
        title,
        _legend(series),
        _table(title, starts, series, kind),
    )


def _check(starts: Sequence[datetime], series: Sequence[Series]) -> None:
    """Raise ValueError unless ``series`` are few enough, each a value per bucket."""
    if len(series) > MAX_SERIES:
        raise ValueError(f"A chart draws at most {MAX_SERIES} series, not {len(series)}.")
    for line in series:
        if len(line.values) != len(starts):
            raise ValueError(
                f"Series {line.label!r} has {len(line.values)} values for {len(starts)} buckets."
            )


def _legend(series: Sequence[Series]) -> SafeString:
    """Return the legend's items: each series' swatch and label."""
    return format_html_join(
        "",
        '<li><svg class="rq-swatch" viewBox="0 0 24 8" aria-hidden="true" focusable="false">'
        '<g class="rq-series rq-s{}"><line x1="0" x2="24" y1="4" y2="4"></line></g></svg>{}</li>',
        ((i + 1, line.label) for i, line in enumerate(series)),
    )
