"""The dashboard's SVG charts: well-formed for any series, every text escaped, and a text
alternative (title, description, data table) that says what the lines show."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest

from django_ratequeue.admin.charts import HEIGHT, WIDTH, Series, line_chart, number, summary

SVG = "{http://www.w3.org/2000/svg}"


def starts(count: int) -> list[datetime]:
    first = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)
    return [first + timedelta(minutes=i) for i in range(count)]


def parse(html: str) -> ET.Element:
    """The chart's markup as XML (it must be well-formed), the SVG namespace added."""
    return ET.fromstring(html.replace("<svg ", f'<svg xmlns="{SVG[1:-1]}" ', 1))


def points(figure: ET.Element) -> list[list[tuple[float, float]]]:
    svg = figure.find(f"{SVG}svg")
    assert svg is not None
    lines = []
    for group in svg.iter(f"{SVG}g"):
        marks = [
            [tuple(map(float, p.split(","))) for p in line.get("points", "").split()]
            for line in group.iter(f"{SVG}polyline")
        ]
        marks += [
            [(float(c.get("cx", "")), float(c.get("cy", "")))] for c in group.iter(f"{SVG}circle")
        ]
        lines.append([p for mark in marks for p in mark])
    return lines


def test_a_chart_has_a_title_a_description_and_a_data_table() -> None:
    html = line_chart(
        "c1",
        "jobs per minute",
        starts(3),
        [Series("started", [1, 5, 2]), Series("failed", [0, 1, 0])],
    )
    figure = parse(html)
    svg = figure.find(f"{SVG}svg")
    assert svg is not None and svg.get("role") == "img"
    assert svg.get("aria-labelledby") == "c1-title c1-desc"
    assert svg.findtext(f"{SVG}title") == "jobs per minute"
    assert svg.findtext(f"{SVG}desc") == (
        "jobs per minute. started: 8 in all, at most 5 per interval; "
        "failed: 1 in all, at most 1 per interval."
    )
    hidden = figure.find("div")
    assert hidden is not None and hidden.get("class") == "visually-hidden"
    table = hidden.find("table")
    assert table is not None
    rows = [[cell.text for cell in row] for row in table.iter("tr")]
    assert rows[0] == ["from", "started", "failed"]
    assert [row[1:] for row in rows[1:]] == [["1", "0"], ["5", "1"], ["2", "0"]]


def test_higher_values_are_drawn_higher_and_the_scale_fits_the_peak() -> None:
    figure = parse(line_chart("c", "t", starts(3), [Series("a", [1, 5, 2])]))
    (line,) = points(figure)
    ys = [y for _x, y in line]
    assert ys[1] < ys[2] < ys[0]  # SVG's y grows downwards
    labels = [t.text for t in figure.iter(f"{SVG}text")]
    assert "5" in labels  # the top of the axis is the peak rounded up to 1, 2 or 5 times 10^n


def test_an_empty_series_draws_axes_and_no_line() -> None:
    figure = parse(line_chart("c", "nothing yet", [], [Series("a", [])]))
    assert points(figure) == [[]]
    assert "a: no data" in (figure.find(f"{SVG}svg").findtext(f"{SVG}desc") or "")  # type: ignore[union-attr]


def test_all_zero_values_draw_a_flat_line_on_the_axis() -> None:
    figure = parse(line_chart("c", "t", starts(4), [Series("a", [0, 0, 0, 0])]))
    (line,) = points(figure)
    assert len(line) == 4 and len({y for _x, y in line}) == 1
    labels = [t.text for t in figure.iter(f"{SVG}text")]
    assert "1" in labels  # a unit scale, not a division by zero


def test_one_point_is_a_dot_and_missing_values_break_the_line() -> None:
    (dot,) = points(parse(line_chart("c", "t", starts(1), [Series("a", [3])])))
    assert len(dot) == 1
    figure = parse(
        line_chart("c", "t", starts(5), [Series("a", [1, 2, None, 4, math.nan])], "seconds")
    )
    svg = figure.find(f"{SVG}svg")
    assert svg is not None
    assert len(list(svg.iter(f"{SVG}polyline"))) == 1  # 1, 2
    assert len(list(svg.iter(f"{SVG}circle"))) == 1  # 4 alone; nan is no value


def test_huge_values_stay_inside_the_plot_and_read_short() -> None:
    huge = [1e15, 2.5e12, 123_456_789, 0]
    figure = parse(line_chart("c", "t", starts(4), [Series("a", huge)]))
    for x, y in points(figure)[0]:
        assert 0 <= x <= WIDTH and 0 <= y <= HEIGHT
    assert number(123_456_789) == "123M"
    assert number(12_500) == "12.5k"
    assert number(2.5e12) == "2.5e+12"
    assert number(0.25, "seconds") == "0.25 s"
    assert number(math.inf) == "-"


@pytest.mark.parametrize(
    "hostile", ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "%s %(x)s {0}"]
)
def test_titles_and_labels_are_escaped(hostile: str) -> None:
    html = line_chart("c", f"queue {hostile}", starts(2), [Series(hostile, [1, 2])])
    assert "<script" not in html and "<img" not in html
    figure = parse(html)  # well-formed: nothing broke out of its attribute or element
    svg = figure.find(f"{SVG}svg")
    assert svg is not None and svg.findtext(f"{SVG}title") == f"queue {hostile}"
    legend = figure.find(".//figcaption//li")
    assert legend is not None and "".join(legend.itertext()) == hostile


def test_series_and_buckets_must_agree() -> None:
    with pytest.raises(ValueError, match="2 values for 3 buckets"):
        line_chart("c", "t", starts(3), [Series("a", [1, 2])])
    with pytest.raises(ValueError, match="at most 3 series"):
        line_chart("c", "t", starts(1), [Series(str(i), [1]) for i in range(4)])


def test_summary_of_levels_and_seconds_gives_the_last_value_and_the_peak() -> None:
    text = summary("depth", [Series("waiting", [4, 9, 2])], "level")
    assert text == "depth. waiting: 2 at the end, at most 9."
    assert re.search(
        r"p95: 1\.5 s at the end", summary("w", [Series("p95", [0.2, 1.5])], "seconds")
    )
