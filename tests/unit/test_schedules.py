"""Tests of `pgqueue.core.schedules`: ticks, backfill, validation. No database here.

The previous tick of a cron expression is found by bisection on
`Cron.next_after`; a property test compares it with a walk of every tick
from the start (the oracle), in zones with and without DST. The SQL that
docs/schedules.md shows is checked against what `Statements` renders.
"""

from __future__ import annotations

import doctest
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pgqueue
from pgqueue.core import schedules as schedules_module
from pgqueue.core.cron import CronError
from pgqueue.core.schedules import (
    EPOCH,
    Schedule,
    ScheduleState,
    UnknownSchedule,
    next_tick_of,
    validate_schedule,
)
from pgqueue.core.sql import Statements

BERLIN = ZoneInfo("Europe/Berlin")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "schedules.md"


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, s: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, s, tzinfo=UTC)


def every(interval: timedelta, **options: Any) -> Schedule:
    return validate_schedule("k", every=interval, **options)


def cron(expression: str, **options: Any) -> Schedule:
    return validate_schedule("k", cron=expression, **options)


# -- every: multiples of the interval since the epoch ------------------------------


def test_every_ticks_are_multiples_of_the_interval_since_the_epoch() -> None:
    s = every(timedelta(minutes=7))
    tick = s.next_after(utc(2024, 5, 1, 12, 0, 30))
    assert (tick - EPOCH) % timedelta(minutes=7) == timedelta(0)
    assert tick - timedelta(minutes=7) <= utc(2024, 5, 1, 12, 0, 30) < tick


def test_workers_looking_at_different_moments_compute_the_same_ticks() -> None:
    s = every(timedelta(seconds=90))
    lookers = [utc(2024, 5, 1, 12) + timedelta(seconds=n) for n in range(0, 300, 7)]
    ticks = {s.next_after(moment) for moment in lookers}
    assert all((t - EPOCH) % timedelta(seconds=90) == timedelta(0) for t in ticks)
    assert ticks == {utc(2024, 5, 1, 12, 0, 0) + n * timedelta(seconds=90) for n in range(1, 5)}


def test_a_day_ticks_at_midnight_utc_and_a_week_on_thursdays() -> None:
    assert every(timedelta(days=1)).next_after(utc(2024, 5, 1, 12)) == utc(2024, 5, 2)
    # 1970-01-01, the epoch, was a Thursday.
    assert every(timedelta(weeks=1)).next_after(utc(2024, 5, 1, 12)).weekday() == 3


def test_the_next_tick_is_strictly_after_the_moment_even_on_a_tick() -> None:
    s = every(timedelta(hours=1))
    assert s.next_after(utc(2024, 5, 1, 12)) == utc(2024, 5, 1, 13)
    assert cron("0 * * * *").next_after(utc(2024, 5, 1, 12)) == utc(2024, 5, 1, 13)


def test_moments_in_any_zone_give_the_same_ticks_as_in_utc() -> None:
    # The database hands back times in the session's zone: arithmetic must not care.
    s = cron("*/30 * * * *", tz="Europe/Berlin", backfill=3)
    last, now = utc(2024, 3, 31, 0, 10), utc(2024, 3, 31, 1, 40)  # across the spring gap
    in_berlin = s.due(last.astimezone(BERLIN), now.astimezone(BERLIN))
    assert in_berlin == s.due(last, now)
    assert in_berlin.ticks == (utc(2024, 3, 31, 0, 30), utc(2024, 3, 31, 1, 0),
                               utc(2024, 3, 31, 1, 30))  # fmt: skip


# -- due: what to enqueue now ----------------------------------------------------------


def test_the_tick_that_just_passed_is_due_once() -> None:
    s = every(timedelta(minutes=1))
    due = s.due(utc(2024, 5, 1, 12, 0), utc(2024, 5, 1, 12, 1) + timedelta(milliseconds=3))
    assert (due.ticks, due.skipped, due.next_tick) == (
        (utc(2024, 5, 1, 12, 1),), None, utc(2024, 5, 1, 12, 2),
    )  # fmt: skip
    assert s.due(utc(2024, 5, 1, 12, 1), utc(2024, 5, 1, 12, 1, 30)).ticks == ()


def test_after_downtime_only_the_latest_tick_is_due_and_the_rest_are_skipped() -> None:
    s = every(timedelta(minutes=1))
    due = s.due(utc(2024, 5, 1, 12, 0), utc(2024, 5, 1, 18, 0, 30))
    assert due.ticks == (utc(2024, 5, 1, 18, 0),)
    assert due.skipped == (utc(2024, 5, 1, 12, 1), utc(2024, 5, 1, 17, 59))


def test_backfill_bounds_the_ticks_due_to_the_latest_ones_oldest_first() -> None:
    s = cron("0 * * * *", backfill=3)
    due = s.due(utc(2024, 5, 1, 0, 0), utc(2024, 5, 3, 0, 30))
    assert due.ticks == (utc(2024, 5, 2, 22), utc(2024, 5, 2, 23), utc(2024, 5, 3, 0))
    assert due.skipped == (utc(2024, 5, 1, 1), utc(2024, 5, 2, 21))
    assert due.next_tick == utc(2024, 5, 3, 1)


def test_backfill_larger_than_the_missed_ticks_enqueues_them_all() -> None:
    s = cron("0 * * * *", backfill=10)
    due = s.due(utc(2024, 5, 1, 0, 0), utc(2024, 5, 1, 3, 30))
    assert due.ticks == (utc(2024, 5, 1, 1), utc(2024, 5, 1, 2), utc(2024, 5, 1, 3))
    assert due.skipped is None


def test_a_schedule_without_a_last_tick_has_nothing_due() -> None:
    due = every(timedelta(minutes=1)).due(None, utc(2024, 5, 1, 12, 0, 30))
    assert (due.ticks, due.skipped, due.next_tick) == ((), None, utc(2024, 5, 1, 12, 1))


def test_a_year_of_a_minutely_cron_is_bisected_not_walked() -> None:
    s = cron("* * * * *", tz="Europe/Berlin")
    calls = 0
    original = s.cron.next_after  # type: ignore[union-attr]

    def counted(moment: datetime, tz: Any) -> datetime:
        nonlocal calls
        calls += 1
        return original(moment, tz)

    object.__setattr__(s.cron, "next_after", counted)
    due = s.due(utc(2023, 5, 1), utc(2024, 5, 1, 12, 0, 30))
    assert due.ticks == (utc(2024, 5, 1, 12, 0),)
    assert due.skipped == (utc(2023, 5, 1, 0, 1), utc(2024, 5, 1, 11, 59))
    assert calls < 200  # a walk is 527,000 calls


def test_dst_ticks_in_berlin_skip_the_gap_and_tick_the_repeated_hour_once() -> None:
    s = cron("30 2 * * *", tz="Europe/Berlin", backfill=5)
    # 2024-03-31 has no 02:30 in Berlin; 2024-10-27 has two, the first ticks.
    spring = s.due(utc(2024, 3, 29, 12), utc(2024, 4, 1, 12))
    assert spring.ticks == (utc(2024, 3, 30, 1, 30), utc(2024, 4, 1, 0, 30))
    autumn = s.due(utc(2024, 10, 26, 12), utc(2024, 10, 28, 12))
    assert autumn.ticks == (utc(2024, 10, 27, 0, 30), utc(2024, 10, 28, 1, 30))


EXPRESSIONS = ["* * * * *", "*/7 * * * *", "30 2 * * *", "0 9 * * MON-FRI", "15 */5 1,15 * *",
               "0 0 29 2 *", "5 4 * * SUN", "0 0 13 * FRI"]  # fmt: skip
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]


@settings(max_examples=150, deadline=None)
@given(
    expression=st.sampled_from(EXPRESSIONS),
    tz=st.sampled_from(ZONES),
    start=st.datetimes(min_value=datetime(2023, 1, 1), max_value=datetime(2026, 1, 1),
                       timezones=st.just(UTC)),
    span=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=1)),
    backfill=st.integers(1, 4),
)  # fmt: skip
def test_due_ticks_are_the_latest_of_every_tick_walked_one_by_one(
    expression: str, tz: str, start: datetime, span: timedelta, backfill: int
) -> None:
    s = cron(expression, tz=tz, backfill=backfill)
    now = start + span
    walked: list[datetime] = []  # the oracle: every tick after start, up to now
    tick = s.next_after(start)
    while tick <= now:
        walked.append(tick)
        tick = s.next_after(tick)
    due = s.due(start, now)
    assert due.ticks == tuple(walked[-backfill:])
    missed = walked[:-backfill]
    assert due.skipped == ((missed[0], missed[-1]) if missed else None)
    assert due.next_tick == tick


# -- validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"cron": "61 * * * *"}, CronError, "minute 61 is out of range"),
        ({"cron": "0 0 30 2 *"}, CronError, "never occurs"),
        ({"cron": "* * * *"}, CronError, "expected 5 fields"),
        ({"cron": 5}, CronError, "must be a str"),
        ({"cron": "* * * * *", "every": timedelta(minutes=1)}, ValueError, "not both"),
        ({}, ValueError, "give cron"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus_Mons"}, ValueError, "unknown time zone"),
        ({"cron": "* * * * *", "tz": "../etc/passwd"}, ValueError, "unknown time zone"),
        ({"cron": "* * * * *", "tz": BERLIN}, TypeError, "time zone name"),
        ({"every": timedelta(milliseconds=999)}, ValueError, "every must be from"),
        ({"every": timedelta(0)}, ValueError, "every must be from"),
        ({"every": -timedelta(minutes=1)}, ValueError, "every must be from"),
        ({"every": 60}, TypeError, "every must be a timedelta"),
        ({"every": timedelta(hours=1), "tz": "Europe/Berlin"}, ValueError, "cron schedules"),
        ({"cron": "@daily", "priority": 101}, ValueError, "priority"),
        ({"cron": "@daily", "queue": ""}, ValueError, "queue name"),
        ({"cron": "@daily", "payload": {1j}}, TypeError, "JSON"),
        ({"cron": "@daily", "name": ""}, ValueError, "schedule name"),
        ({"cron": "@daily", "name": 3}, TypeError, "schedule name"),
        ({"cron": "@daily", "overlap": "no"}, TypeError, "overlap"),
        ({"cron": "@daily", "backfill": 0}, ValueError, "backfill"),
        ({"cron": "@daily", "backfill": 1001}, ValueError, "backfill"),
        ({"cron": "@daily", "backfill": True}, TypeError, "backfill"),
    ],
)
def test_bad_schedules_are_refused_with_a_clear_error(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        validate_schedule("report", **options)


def test_a_bad_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="kind"):
        validate_schedule("", cron="@daily")


def test_the_name_defaults_to_the_kind_and_overlap_false_gives_a_unique_key() -> None:
    s = validate_schedule("report", cron="@daily", overlap=False, payload={"a": 1})
    assert (s.name, s.unique_key, s.payload_json) == ("report", "schedule:report", '{"a":1}')
    assert validate_schedule("report", cron="@daily").unique_key is None


def test_a_stored_row_that_is_no_schedule_has_no_next_tick() -> None:
    assert next_tick_of("not cron", None, "UTC", utc(2024, 1, 1)) is None
    assert next_tick_of(None, timedelta(hours=1), "UTC", utc(2024, 1, 1)) == utc(2024, 1, 1, 1)
    row = ("n", "k", "@hourly", None, "UTC", None, "default", 0, True, False, None, None,
           utc(2024, 1, 1), utc(2024, 1, 1, 0, 30))  # fmt: skip
    assert ScheduleState.from_row(row).next_tick == utc(2024, 1, 1, 1)


def test_fixed_offsets_are_not_zone_names() -> None:
    with pytest.raises(TypeError):
        validate_schedule("k", cron="@daily", tz=UTC)


def test_public_names() -> None:
    assert pgqueue.ScheduleState is ScheduleState
    assert pgqueue.UnknownSchedule is UnknownSchedule
    assert issubclass(UnknownSchedule, LookupError)


def test_module_docstring_examples() -> None:
    assert doctest.testmod(schedules_module, raise_on_error=True).attempted > 0


# -- the documentation shows the SQL the code runs ---------------------------------------


def normalize(text: str) -> str:
    text = re.sub(r"--[^\n]*", "", text)
    return " ".join(text.split()).rstrip(";").strip()


def test_the_sql_in_docs_schedules_is_the_sql_the_code_runs() -> None:
    rendered = {
        normalize(v.decode())
        for value in Statements("pgqueue_jobs").every().values()
        for v in (value.values() if isinstance(value, dict) else [value])
        if isinstance(v, bytes)
    }
    shown = [normalize(b) for b in re.findall(r"```sql\n(.*?)```", DOCS.read_text(), flags=re.S)]
    assert shown, "docs/schedules.md shows no SQL"
    for statement in shown:
        assert statement in rendered, statement[:80]
