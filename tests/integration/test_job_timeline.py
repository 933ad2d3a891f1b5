"""The attempts' SVG timeline on a job's admin page (admin/timeline.py): one row per
attempt, back-off gaps, a running attempt drawn up to now, escaped texts, many attempts."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

from django_ratequeue.admin import attemptwords, timeline
from django_ratequeue.engine.handles import AttemptInfo

SVG = "{http://www.w3.org/2000/svg}"
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def attempt(
    number: int,
    dispatched: float,
    started: float | None,
    ended: float | None,
    outcome: str = "",
    error: str = "",
) -> AttemptInfo:
    """An attempt whose times are seconds after T0."""

    def at(seconds: float | None) -> datetime | None:
        return None if seconds is None else T0 + timedelta(seconds=seconds)

    return AttemptInfo(
        number=number,
        dispatched_at=T0 + timedelta(seconds=dispatched),
        started_at=at(started),
        ended_at=at(ended),
        outcome=outcome,
        error=error,
        traceback="",
        worker="w1",
    )


def drawing(svg: str) -> ET.Element:
    """The SVG parsed as XML (so it is well-formed), without the note that may follow it."""
    return ET.fromstring(svg.split("</svg>")[0] + "</svg>")


def bars(svg: str, css: str) -> list[ET.Element]:
    return [r for r in drawing(svg).iter(f"{SVG}rect") if css in r.get("class", "").split()]


def texts(svg: str, css: str) -> list[str]:
    return [t.text or "" for t in drawing(svg).iter(f"{SVG}text") if t.get("class") == css]


def test_a_job_that_failed_then_succeeded_has_a_row_per_attempt_and_a_back_off_between() -> None:
    attempts = [
        attempt(1, 0, 0.2, 1.2, "failed", "boom"),
        attempt(2, 3.2, 3.3, 4.3, "succeeded"),
    ]

    svg = timeline.render(attempts, now=T0 + timedelta(seconds=10))

    root = drawing(svg)
    assert root.get("role") == "img" and root.get("data-rows") == "2"
    assert len(bars(svg, "rq-wait")) == 2  # dispatched → started, per attempt
    assert [b.get("class") for b in bars(svg, "rq-run")] == [
        "rq-run rq-failed",
        "rq-run rq-succeeded",
    ]
    assert texts(svg, "rq-outcome") == ["Failed, 1 s", "Succeeded, 1 s"]
    backoffs = [line for line in root.iter(f"{SVG}line") if line.get("class") == "rq-backoff"]
    assert len(backoffs) == 1
    assert backoffs[0].findtext(f"{SVG}title") == "Back-off of 2 s before attempt 2"
    assert "2 s" in texts(svg, "rq-label")  # the gap's label
    description = root.findtext(f"{SVG}desc")
    assert description == "2 attempts: 1 failed, 1 succeeded. Back-off between attempts: 2 s."
    assert not [line for line in root.iter(f"{SVG}line") if line.get("class") == "rq-now"]


def test_a_running_attempt_is_drawn_up_to_now() -> None:
    now = T0 + timedelta(seconds=8)
    svg = timeline.render([attempt(1, 0, 2, None)], now=now)

    scale = timeline.Scale(T0, 8)
    run = bars(svg, "rq-running")
    assert len(run) == 1
    assert float(run[0].get("x", "")) == scale.x(T0 + timedelta(seconds=2))
    end = float(run[0].get("x", "")) + float(run[0].get("width", ""))
    assert abs(end - scale.x(now)) < 0.2
    now_lines = [line for line in drawing(svg).iter(f"{SVG}line") if line.get("class") == "rq-now"]
    assert len(now_lines) == 1 and float(now_lines[0].get("x1", "")) == scale.x(now)
    assert texts(svg, "rq-outcome") == ["running, 6 s"]


def test_an_attempt_waiting_for_a_runner_and_a_retry_due_later() -> None:
    waiting = timeline.render([attempt(1, 0, None, None)], now=T0 + timedelta(seconds=3))
    assert len(bars(waiting, "rq-wait")) == 1 and not bars(waiting, "rq-run")
    assert texts(waiting, "rq-outcome") == ["waiting for a runner"]

    retrying = timeline.render(
        [attempt(1, 0, 0, 1, "failed")],
        now=T0 + timedelta(seconds=2),
        next_start=T0 + timedelta(seconds=31),
    )
    assert drawing(retrying).get("data-rows") == "1"
    assert "next" in texts(retrying, "rq-label") and "30 s" in texts(retrying, "rq-label")
    assert texts(retrying, "rq-outcome")[-1].startswith("due ")
    assert "Next attempt at" in (drawing(retrying).findtext(f"{SVG}desc") or "")


def test_zero_length_and_missing_times_still_draw_visible_bars() -> None:
    attempts = [
        attempt(1, 0, 0, 0, "failed"),  # dispatched, started and ended at once
        attempt(2, 0, None, 0, ""),  # canceled before a runner started it
        attempt(3, 5, 4, 5, "succeeded"),  # started "before" dispatch: another host's clock
    ]
    svg = timeline.render(attempts, now=T0)

    assert drawing(svg).get("data-rows") == "3"
    for rect in bars(svg, "rq-wait") + bars(svg, "rq-run"):
        assert float(rect.get("width", "")) >= timeline.MIN_BAR
        assert timeline.LABEL_WIDTH <= float(rect.get("x", "")) <= timeline.WIDTH
    assert bars(svg, "rq-unstarted")  # the canceled one is drawn as never started
    assert texts(svg, "rq-outcome")[1] == "ended before it started"


def test_hostile_error_text_is_escaped() -> None:
    hostile = '</title><script>alert("x")</script><title>&'
    svg = timeline.render([attempt(1, 0, 0, 1, "failed", hostile)], now=T0)

    assert "<script>" not in svg
    assert "&lt;script&gt;" in svg
    tooltip = bars(svg, "rq-failed")[0].findtext(f"{SVG}title") or ""
    assert tooltip.endswith(f": {hostile}")  # shown as text, whole


def test_a_long_error_is_cut_in_its_tooltip() -> None:
    svg = timeline.render([attempt(1, 0, 0, 1, "failed", "x" * 5000)], now=T0)
    tooltip = bars(svg, "rq-failed")[0].findtext(f"{SVG}title") or ""
    assert len(tooltip) < 300 and tooltip.endswith("…")


def test_fifty_attempts_draw_the_latest_and_say_how_many_are_hidden() -> None:
    attempts = [attempt(n, n * 10, n * 10 + 1, n * 10 + 2, "failed") for n in range(1, 51)]

    svg = timeline.render(attempts, now=T0 + timedelta(seconds=600))

    assert drawing(svg).get("data-rows") == str(timeline.MAX_DRAWN)
    labels = [t for t in texts(svg, "rq-label") if t.startswith("#")]
    assert labels == [f"#{n}" for n in range(51 - timeline.MAX_DRAWN, 51)]
    assert f"The {50 - timeline.MAX_DRAWN} earlier attempts are not drawn" in svg
    # The gap before the first drawn attempt, after a hidden one, is still a back-off.
    backoffs = [
        line for line in drawing(svg).iter(f"{SVG}line") if line.get("class") == "rq-backoff"
    ]
    assert len(backoffs) == timeline.MAX_DRAWN
    description = drawing(svg).findtext(f"{SVG}desc") or ""
    assert description.startswith("50 attempts: 50 failed.")
    assert "from 8 s to 8 s" in description


def test_ticks_are_round_and_readable() -> None:
    assert timeline.tick_step(0.3) == 0.05
    assert timeline.tick_step(8) == 2
    assert timeline.tick_step(3600) == 600
    assert timeline.tick_label(0.25, 0.05) == "+250 ms"
    assert timeline.tick_label(90, 30) == "+90 s"
    assert timeline.tick_label(1200, 600) == "+20 min"
    assert timeline.tick_label(7200, 3600) == "+2 h"
    svg = timeline.render([attempt(1, 0, 1, 8, "succeeded")], now=T0)
    ticks = texts(svg, "rq-tick")
    assert ticks == ["03:04:05.000", "+2 s", "+4 s", "+6 s", "+8 s"]  # 0 at its clock time


def test_durations_in_words() -> None:
    assert [attemptwords.duration(s) for s in (0, 0.25, 1.5, 150, 3600, 5400, 200000)] == [
        "0 s",
        "250 ms",
        "1.5 s",
        "2 min 30 s",
        "1 h",
        "1 h 30 min",
        "2.31 d",
    ]


def test_no_attempt_draws_nothing() -> None:
    assert timeline.render([], now=T0) == ""
    assert attemptwords.summary([], None) == "No attempt yet."
