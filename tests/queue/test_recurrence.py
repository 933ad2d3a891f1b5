"""The times a schedule runs, and what a misfire policy does, against a brute-force model.

The model walks wall-clock minutes one by one: a matching wall time runs at the instant
its first meaning names (fold=0). See docs/schedules.md ("Time zones and DST")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_ratequeue.plugins.schedules.catchup import ALL_LIMIT, MISFIRE_GRACE, catch_up
from django_ratequeue.plugins.schedules.declarations import parse_spec, run_id
from django_ratequeue.plugins.schedules.recurrence import Recurrence

ZONES = [
    "UTC",
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe",  # moves its clocks by 30 minutes
    "America/Santiago",
    "Asia/Kolkata",
    "Pacific/Chatham",
]
# Around the changes of offset of 2026 in those zones (and plain days).
DAYS = [
    datetime(2026, 3, 8, tzinfo=UTC),
    datetime(2026, 3, 28, tzinfo=UTC),
    datetime(2026, 4, 4, tzinfo=UTC),
    datetime(2026, 9, 5, tzinfo=UTC),
    datetime(2026, 9, 26, tzinfo=UTC),
    datetime(2026, 10, 3, tzinfo=UTC),
    datetime(2026, 10, 24, tzinfo=UTC),
    datetime(2026, 10, 31, tzinfo=UTC),
    datetime(2026, 11, 1, tzinfo=UTC),
    datetime(2026, 7, 14, tzinfo=UTC),
]


class Cron:
    """A cron expression built from the sets it matches, which the model matches directly."""

    def __init__(
        self,
        minutes: set[int],
        hours: set[int] | None,
        days: set[int] | None,
        dows: set[int] | None,
    ) -> None:
        self.minutes, self.hours, self.days, self.dows = minutes, hours, days, dows

    @staticmethod
    def field(values: set[int] | None) -> str:
        return "*" if values is None else ",".join(map(str, sorted(values)))

    @property
    def text(self) -> str:
        fields = (self.minutes, self.hours, self.days, None, self.dows)
        return " ".join(map(self.field, fields))

    def matches(self, wall: datetime) -> bool:
        return (
            wall.minute in self.minutes
            and (self.hours is None or wall.hour in self.hours)
            and (self.days is None or wall.day in self.days)
            and (self.dows is None or (wall.isoweekday() % 7) in self.dows)
        )


def some(low: int, high: int) -> st.SearchStrategy[set[int]]:
    return st.sets(st.integers(low, high), min_size=1, max_size=3)


crons = st.builds(
    Cron,
    some(0, 59),
    st.none() | some(0, 23),
    st.none() | some(1, 31),
    st.none(),
) | st.builds(Cron, some(0, 59), st.none() | some(0, 23), st.none(), st.none() | some(0, 6))


def model_runs(cron: Cron, zone: str, start: datetime, end: datetime) -> list[datetime]:
    """Return the runs in (start, end] by walking every wall minute around them."""
    tz = ZoneInfo(zone)
    wall = (start.astimezone(tz) - timedelta(hours=4)).replace(
        tzinfo=None, second=0, microsecond=0
    )
    last = (end.astimezone(tz) + timedelta(hours=4)).replace(tzinfo=None)
    runs = set()
    while wall <= last:
        if cron.matches(wall):
            moment = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
            if start < moment <= end:
                runs.add(moment)
        wall += timedelta(minutes=1)
    return sorted(runs)


def runs_between(recurrence: Recurrence, start: datetime, end: datetime) -> list[datetime]:
    runs = []
    moment = recurrence.next_after(start)
    while moment <= end:
        runs.append(moment)
        moment = recurrence.next_after(moment)
    return runs


@settings(max_examples=200, deadline=None)
@given(
    cron=crons,
    zone=st.sampled_from(ZONES),
    day=st.sampled_from(DAYS),
    offset=st.integers(0, 3 * 24 * 3600),
)
def test_cron_runs_are_the_models(cron: Cron, zone: str, day: datetime, offset: int) -> None:
    start = day + timedelta(seconds=offset)
    end = start + timedelta(days=2)
    recurrence = Recurrence.parse(cron.text, None, zone)
    assert runs_between(recurrence, start, end) == model_runs(cron, zone, start, end)


@settings(max_examples=100, deadline=None)
@given(every=st.integers(1, 7 * 24 * 3600), offset=st.floats(0, 1e9))
def test_intervals_run_at_multiples_of_every_since_the_epoch(every: int, offset: float) -> None:
    start = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=offset)
    first = Recurrence(every=every).next_after(start)
    assert first > start
    assert first - start <= timedelta(seconds=every)
    assert (first - datetime(1970, 1, 1, tzinfo=UTC)) % timedelta(seconds=every) == timedelta(0)


def test_a_daily_0230_run_on_the_days_paris_changes_its_clocks() -> None:
    daily = Recurrence.parse("30 2 * * *", None, "Europe/Paris")
    spring = runs_between(
        daily, datetime(2026, 3, 28, tzinfo=UTC), datetime(2026, 3, 31, tzinfo=UTC)
    )
    # 02:30 does not exist on 29 March: it runs at 03:30 CEST, the instant 02:30 CET names.
    assert spring == [
        datetime(2026, 3, 28, 1, 30, tzinfo=UTC),
        datetime(2026, 3, 29, 1, 30, tzinfo=UTC),
        datetime(2026, 3, 30, 0, 30, tzinfo=UTC),
    ]
    autumn = runs_between(
        daily, datetime(2026, 10, 24, tzinfo=UTC), datetime(2026, 10, 27, tzinfo=UTC)
    )
    # 02:30 happens twice on 25 October: it runs once, the first time (CEST).
    assert autumn == [
        datetime(2026, 10, 24, 0, 30, tzinfo=UTC),
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
        datetime(2026, 10, 26, 1, 30, tzinfo=UTC),
    ]


def model_policy(due: list[datetime], visit: datetime, misfire: str) -> tuple[list[datetime], int]:
    """Return the runs a visit at ``visit`` enqueues of ``due``, and how many it skips."""
    missed = [t for t in due if t < visit - MISFIRE_GRACE]
    on_time = due[len(missed) :]
    kept = {"skip": [], "once": missed[-1:], "all": missed[-ALL_LIMIT:]}[misfire]
    return kept + on_time, len(missed) - len(kept)


@settings(max_examples=100, deadline=None)
@given(
    every=st.sampled_from([None, 1, 60, 300, 3600]),
    cron=crons,
    zone=st.sampled_from(ZONES),
    day=st.sampled_from(DAYS),
    gaps=st.lists(st.integers(1, 2 * 24 * 3600), min_size=1, max_size=6),
    misfire=st.sampled_from(["skip", "once", "all"]),
    chunk=st.sampled_from([250, 1000, 10_000]),
)
def test_catch_up_after_downtimes_is_the_models(
    every: int | None,
    cron: Cron,
    zone: str,
    day: datetime,
    gaps: list[int],
    misfire: str,
    chunk: int,
) -> None:
    """The loop visits the schedule after each gap; every due run is enqueued or counted."""
    recurrence = Recurrence.parse(None if every else cron.text, every, zone)
    created = day
    visits = []
    for gap in gaps:
        visits.append((visits[-1] if visits else created) + timedelta(seconds=gap))
    all_runs = runs_between(recurrence, created, visits[-1])
    # The implementation, step by step.
    next_run = recurrence.next_after(created)
    enqueued, skipped = [], 0
    for visit in visits:
        while next_run <= visit:
            plan = catch_up(recurrence, next_run, visit, misfire, chunk)
            enqueued += plan.runs
            skipped += plan.skipped
            next_run = plan.next_run_at
    # The model, with the runs of the minute walk (or the interval's multiples).
    expected, expected_skipped, last = [], 0, created
    for visit in visits:
        due = [t for t in all_runs if last < t <= visit]
        runs, skips = model_policy(due, visit, misfire)
        expected += runs
        expected_skipped += skips
        last = visit
    assert enqueued == expected
    assert skipped == expected_skipped
    assert len(enqueued) + skipped == len(all_runs)  # never silently skipped
    assert len(set(map(lambda t: run_id("s", t), enqueued))) == len(enqueued)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"function": "a.b", "cron": "61 * * * *"}, "cron"),
        ({"function": "a.b", "cron": "* * * *"}, "five"),
        ({"function": "a.b", "cron": "* * * * * *"}, "five"),
        ({"function": "a.b", "cron": "0 0 30 2 *"}, "never matches"),
        ({"function": "a.b", "cron": "H * * * *"}, "hashed"),
        # A step beyond its field's range matches the first value alone (issue 31).
        ({"function": "a.b", "cron": "*/61 * * * *"}, "step /61 of the minute field"),
        ({"function": "a.b", "cron": "*/60 * * * *"}, "minute step is at most 59"),
        ({"function": "a.b", "cron": "0 */24 * * *"}, "hour"),
        ({"function": "a.b", "cron": "0 0 1-5/31 * *"}, "day-of-month"),
        ({"function": "a.b", "cron": "0 0 1 1,*/12 *"}, "month"),
        ({"function": "a.b", "cron": "0 0 * * */7"}, "day-of-week"),
        ({"function": "a.b", "cron": "0 3 * * *", "timezone": "Mars/Olympus"}, "Mars/Olympus"),
        ({"function": "a.b", "cron": "0 3 * * *", "timezone": "Europe/\x00"}, "timezone"),
        ({"function": "a.b", "every": 0}, "every"),
        ({"function": "a.b", "every": -5}, "every"),
        ({"function": "a.b", "every": float("inf")}, "every"),
        ({"function": "a.b", "every": float("nan")}, "every"),
        ({"function": "a.b", "every": 10**30}, "every"),
        ({"function": "a.b", "every": True}, "every"),
        ({"function": "a.b", "every": "60"}, "every"),
        ({"function": "a.b"}, "exactly one"),
        ({"function": "a.b", "cron": "0 3 * * *", "every": 60}, "exactly one"),
        ({"function": "a.b", "every": 60, "misfire": "sometimes"}, "misfire"),
        ({"function": "a.b", "every": 60, "args": "x"}, "args"),
        ({"function": "a.b", "every": 60, "args": [float("nan")]}, "args"),
        ({"function": "a.b", "every": 60, "kwargs": {"s": "\ud800"}}, "kwargs"),
        ({"function": "a.b", "every": 60, "options": {"id": "x"}}, "id"),
        ({"function": "a.b", "every": 60, "colour": "red"}, "colour"),
        ({"function": 3, "every": 60}, "function"),
        ({"function": "a.b", "cron": "x" * 10_000}, "longer"),
    ],
)
def test_bad_declarations_are_refused_saying_why(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_spec("nightly", raw)


@pytest.mark.parametrize("name", ["", " ", "x" * 151, "a\x00b", "\udce9", 3])
def test_bad_names_are_refused(name: object) -> None:
    with pytest.raises(ValueError):
        parse_spec(name, {"function": "a.b", "every": 60})


def test_run_ids_derive_from_the_name_and_the_time() -> None:
    at = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
    assert run_id("nightly", at) == "nightly@20261127T030000Z"
    assert run_id("fast", at + timedelta(microseconds=5)) == "fast@20261127T030000.000005Z"
    paris = at.astimezone(ZoneInfo("Europe/Paris"))
    assert run_id("nightly", paris) == run_id("nightly", at)


@pytest.mark.parametrize(
    "cron", ["*/59 * * * *", "0 */23 * * *", "0 0 */30 * *", "0 0 1 */11 */6"]
)
def test_steps_within_their_fields_range_are_taken(cron: str) -> None:
    assert parse_spec("nightly", {"function": "a.b", "cron": cron}).recurrence.cron == cron
