"""Tests of `pgqueue.core.cron`: parsing, the day rule, time zones, and an oracle.

No database here. The property test compares `Cron.next_after` with a
brute-force oracle that walks UTC minute by minute and applies the documented
rules directly: a UTC minute ticks when its wall time in the zone matches the
fields and is that wall time's first occurrence (``fold == 0``); wall times in
a spring-forward gap never appear when converting from UTC, so they are
skipped by construction.
"""

from __future__ import annotations

import dataclasses
import doctest
import itertools
from datetime import UTC, date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pgqueue.core import cron as cron_module
from pgqueue.core.cron import Cron, CronError

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")  # DST moves the clock by 30 minutes
ZONES = [ZoneInfo("UTC"), BERLIN, NEW_YORK, LORD_HOWE]
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
ORACLE_WINDOW = timedelta(days=400)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, s: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, s, tzinfo=UTC)


def local(
    zone: ZoneInfo, y: int, m: int, d: int, hour: int, minute: int, fold: int = 0
) -> datetime:
    return datetime(y, m, d, hour, minute, tzinfo=zone, fold=fold)


def ticks(expression: str, start: datetime, count: int, zone: ZoneInfo = BERLIN) -> list[datetime]:
    cron, out = Cron.parse(expression), []
    for _ in range(count):
        start = cron.next_after(start, zone)
        out.append(start)
    return out


# Known examples ------------------------------------------------------------


def test_every_fifteen_minutes() -> None:
    got = ticks("*/15 * * * *", utc(2024, 5, 1, 10, 7, 30), 4, ZoneInfo("UTC"))
    assert got == [utc(2024, 5, 1, 10, m) for m in (15, 30, 45)] + [utc(2024, 5, 1, 11, 0)]


def test_weekdays_at_half_past_nine_in_berlin() -> None:
    # Friday 2024-05-03 10:00 Berlin (CEST, UTC+2): the next is Monday, then Tuesday.
    got = ticks("30 9 * * 1-5", local(BERLIN, 2024, 5, 3, 10, 0), 2)
    assert got == [utc(2024, 5, 6, 7, 30), utc(2024, 5, 7, 7, 30)]


def test_or_rule_when_both_day_fields_are_restricted() -> None:
    # The 13th, or any Friday: 2024-09-06 and 13 are Fridays, 2024-09-20 too.
    got = ticks("0 12 13 * FRI", utc(2024, 9, 1), 4, ZoneInfo("UTC"))
    assert [t.day for t in got] == [6, 13, 20, 27]
    assert Cron.parse("0 12 13 * FRI").day_any is False


def test_and_rule_when_day_of_week_is_star() -> None:
    got = ticks("0 0 13 * *", utc(2024, 9, 1), 2, ZoneInfo("UTC"))
    assert got == [utc(2024, 9, 13), utc(2024, 10, 13)]


def test_and_rule_when_day_of_month_is_star() -> None:
    got = ticks("0 0 * * FRI", utc(2024, 9, 1), 2, ZoneInfo("UTC"))
    assert got == [utc(2024, 9, 6), utc(2024, 9, 13)]


def test_star_step_in_a_day_field_counts_as_restricted() -> None:
    cron = Cron.parse("0 0 */10 * MON")
    assert (cron.day_any, cron.weekday_any) == (False, False)
    # Days 1, 11, 21, 31 or Mondays: 2024-07-01 (Mon), 08 (Mon), 11, 15 (Mon).
    got = ticks("0 0 */10 * MON", utc(2024, 6, 30), 4, ZoneInfo("UTC"))
    assert [t.day for t in got] == [1, 8, 11, 15]


def test_step_in_range_field() -> None:
    assert Cron.parse("10-30/10 * * * *").minutes == {10, 20, 30}


def test_start_with_step_runs_to_the_field_maximum() -> None:
    assert Cron.parse("50/4 * * * *").minutes == {50, 54, 58}
    assert Cron.parse("0 0 * * 1/2").weekdays == {1, 3, 5}


def test_lists_of_numbers_ranges_and_steps() -> None:
    cron = Cron.parse("0,5,10-12,*/20 1,2 1 1 *")
    assert cron.minutes == {0, 5, 10, 11, 12, 20, 40}
    assert cron.hours == {1, 2}


def test_month_and_weekday_names_in_any_case() -> None:
    cron = Cron.parse("0 0 * jan,Mar-MAY sun-Tue")
    assert cron.months == {1, 3, 4, 5}
    assert cron.weekdays == {0, 1, 2}


def test_weekday_seven_is_sunday() -> None:
    assert Cron.parse("0 0 * * 7").weekdays == {0}
    assert Cron.parse("0 0 * * 5-7").weekdays == {5, 6, 0}


@pytest.mark.parametrize(
    ("macro", "equivalent"),
    [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@ANNUALLY", "0 0 1 1 *"),
    ],
)
def test_macros_mean_their_expressions(macro: str, equivalent: str) -> None:
    cron, plain = Cron.parse(macro), Cron.parse(equivalent)
    assert cron.expression == macro
    assert dataclasses.replace(cron, expression=equivalent) == plain


def test_expression_is_kept_as_given() -> None:
    assert Cron.parse("  */5  *  * * *\n").expression == "  */5  *  * * *\n"


def test_february_29_is_a_date_every_leap_year() -> None:
    assert ticks("0 0 29 2 *", utc(2097, 3, 1), 1, ZoneInfo("UTC")) == [utc(2104, 2, 29)]


def test_fixed_offset_time_zones_are_accepted() -> None:
    nepal = timezone(timedelta(hours=5, minutes=45))
    assert Cron.parse("0 6 * * *").next_after(utc(2024, 1, 1), nepal) == utc(2024, 1, 1, 0, 15)


def test_module_docstring_examples() -> None:
    assert doctest.testmod(cron_module, raise_on_error=True).attempted > 0


# Results -------------------------------------------------------------------


def test_result_is_utc_aware_and_strictly_after_a_tick() -> None:
    cron = Cron.parse("0 * * * *")
    tick = cron.next_after(local(NEW_YORK, 2024, 2, 1, 8, 0), NEW_YORK)
    assert tick == utc(2024, 2, 1, 14, 0)
    assert tick.tzinfo is UTC


def test_naive_moment_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        Cron.parse("* * * * *").next_after(datetime(2024, 1, 1), BERLIN)


# Bad input -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("61 * * * *", "minute 61 is out of range 0-59"),
        ("* 24 * * *", "hour 24 is out of range 0-23"),
        ("* * 0 * *", "day-of-month 0 is out of range 1-31"),
        ("* * 32 * *", "day-of-month 32 is out of range 1-31"),
        ("* * * 13 *", "month 13 is out of range 1-12"),
        ("* * * * 8", "day-of-week 8 is out of range 0-7"),
        ("*/0 * * * *", "minute step '0' is not a positive number"),
        ("* */x * * *", "hour step 'x' is not a positive number"),
        ("* 1/ * * *", "hour step '' is not a positive number"),
        ("* * 20-10 * *", "day-of-month range '20-10' is reversed"),
        ("* * * DEC-JAN *", "month range 'DEC-JAN' is reversed"),
        ("1,,2 * * * *", "minute '1,,2' has an empty item"),
        ("1, * * * *", "minute '1,' has an empty item"),
        ("-1 * * * *", "minute '' is not a number"),
        ("x * * * *", "minute 'x' is not a number"),
        ("1-2-3 * * * *", "minute '2-3' is not a number"),
        ("* * * FOO *", "month 'FOO' is not a number or a month name"),
        ("* * * * MONDAY", "day-of-week 'MONDAY' is not a number or a day-of-week name"),
        ("* * * * JAN", "day-of-week 'JAN' is not a number or a day-of-week name"),
        ("* * * * * *", "expected 5 fields"),
        ("* * * *", "expected 5 fields"),
        ("", "expected 5 fields"),
        ("@fortnightly", "unknown macro"),
        ("0 0 30 2 *", "day-of-month 30 never occurs in month 2"),
        ("0 0 31 4,6,9,11 *", "day-of-month 31 never occurs in month 4,6,9,11"),
    ],
)
def test_bad_expression_raises_cron_error_naming_field_and_value(
    expression: str, message: str
) -> None:
    with pytest.raises(CronError) as info:
        Cron.parse(expression)
    assert message in str(info.value)
    assert str(info.value).startswith(f"cron expression {expression!r}: ")
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("expression", [None, 5, b"* * * * *", ["*"] * 5])
def test_non_str_expression_raises_cron_error(expression: object) -> None:
    with pytest.raises(CronError, match="must be a str"):
        Cron.parse(expression)  # type: ignore[arg-type]


def test_impossible_date_is_allowed_when_the_weekday_is_restricted_too() -> None:
    # The OR rule: February 30 never comes, but Mondays in February do.
    assert ticks("0 0 30 2 MON", utc(2024, 1, 1), 1, ZoneInfo("UTC")) == [utc(2024, 2, 5)]


def test_no_tick_left_in_the_calendar_raises_cron_error() -> None:
    # No February 29 between 9997 and the end of `datetime`'s range.
    with pytest.raises(CronError, match="no tick within 9 years"):
        Cron.parse("0 0 29 2 *").next_after(utc(9997, 3, 1), ZoneInfo("UTC"))
    with pytest.raises(CronError, match="no tick"):
        Cron.parse("0 23 * * *").next_after(utc(9999, 12, 31, 12), NEW_YORK)


# Daylight saving time ------------------------------------------------------


def test_spring_forward_gap_wall_time_is_skipped() -> None:
    # 2024-03-31 in Berlin: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist.
    got = ticks("30 2 * * *", local(BERLIN, 2024, 3, 30, 0, 0), 2)
    assert got == [utc(2024, 3, 30, 1, 30), utc(2024, 4, 1, 0, 30)]


def test_fall_back_repeated_wall_time_fires_once_at_first_occurrence() -> None:
    # 2024-10-27 in Berlin: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
    got = ticks("30 2 * * *", local(BERLIN, 2024, 10, 26, 12, 0), 2)
    assert got == [utc(2024, 10, 27, 0, 30), utc(2024, 10, 28, 1, 30)]
    second = local(BERLIN, 2024, 10, 27, 2, 15, fold=1)  # between the two 02:30s
    assert ticks("30 2 * * *", second, 1) == [utc(2024, 10, 28, 1, 30)]


def test_every_minute_is_silent_during_the_repeated_hour() -> None:
    got = ticks("* * * * *", local(BERLIN, 2024, 10, 27, 2, 58), 3)
    assert got == [utc(2024, 10, 27, 0, 59), utc(2024, 10, 27, 2, 0), utc(2024, 10, 27, 2, 1)]


def test_half_hour_shift_on_lord_howe() -> None:
    # 2024-10-06: 02:00 (UTC+10:30) jumps to 02:30 (UTC+11); 02:15 does not exist.
    got = ticks("15,45 2 * * *", local(LORD_HOWE, 2024, 10, 6, 0, 0), 3, LORD_HOWE)
    assert got == [utc(2024, 10, 5, 15, 45), utc(2024, 10, 6, 15, 15), utc(2024, 10, 6, 15, 45)]


# Property: next_after agrees with a brute-force oracle ----------------------

Field = tuple[str, frozenset[int]]


@st.composite
def fields(
    draw: st.DrawFn, lowest: int, highest: int, top: int, names: list[str], star: bool = False
) -> Field:
    """A field's text and the values it stands for (7 still standing for 7); `star`: "*"."""

    def number(n: int) -> str:
        if names and n < len(names) and draw(st.booleans()):
            name = names[n]
            return draw(st.sampled_from([name, name.lower(), name.title()]))
        return str(n)

    if star or draw(st.integers(0, 3)) == 0:
        return "*", frozenset(range(lowest, top + 1))
    items: list[str] = []
    values: set[int] = set()
    for _ in range(draw(st.integers(1, 3))):
        a = draw(st.integers(lowest, highest))
        b = draw(st.integers(a, highest))
        step = draw(st.integers(1, top))
        kind = draw(st.sampled_from(["n", "a-b", "*/n", "a-b/n", "a/n"]))
        if kind == "n":
            items.append(number(a))
            values.add(a)
        elif kind == "a-b":
            items.append(f"{number(a)}-{number(b)}")
            values.update(range(a, b + 1))
        elif kind == "*/n":
            items.append(f"*/{step}")
            values.update(range(lowest, top + 1, step))
        elif kind == "a-b/n":
            items.append(f"{number(a)}-{number(b)}/{step}")
            values.update(range(a, b + 1, step))
        else:
            items.append(f"{number(a)}/{step}")
            values.update(range(a, max(a, top) + 1, step))
    return ",".join(items), frozenset(values)


MONTH_NAMES = ["", *cron_module.MONTHS]  # index = number
WEEKDAY_NAMES = list(cron_module.WEEKDAYS)


def expressions(near_a_change: bool) -> st.SearchStrategy[tuple[Field, ...]]:
    """Random fields; near a DST change, every day at a few hours about 1-3 a.m."""
    hours = fields(0, 23, 23, [])
    if near_a_change:
        some = st.sets(st.integers(0, 4), min_size=1, max_size=3)
        hours = some.map(lambda h: (",".join(map(str, sorted(h))), frozenset(h)))
    return st.tuples(
        fields(0, 59, 59, []),
        hours,
        fields(1, 31, 31, [], star=near_a_change),
        fields(1, 12, 12, MONTH_NAMES, star=near_a_change),
        fields(0, 7, 6, WEEKDAY_NAMES, star=near_a_change),
    )


def oracle(parts: tuple[Field, ...], zone: ZoneInfo, moment: datetime) -> datetime | None:
    """The first UTC minute after `moment` whose wall time ticks, within ORACLE_WINDOW."""
    (_, minutes), (_, hours), (dom_text, days), (_, months), (dow_text, weekdays) = parts
    weekdays = frozenset(d % 7 for d in weekdays)
    either = dom_text != "*" and dow_text != "*"

    def day_matches(d: date) -> bool:
        by_dom, by_dow = d.day in days, d.isoweekday() % 7 in weekdays
        return d.month in months and ((by_dom or by_dow) if either else (by_dom and by_dow))

    hour = moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    while hour <= moment + ORACLE_WINDOW:
        # These zones change offset away from local midnight, so within one UTC
        # hour the local date changes at most once: the hour's ends show its dates.
        ends = (hour.astimezone(zone).date(), (hour + 59 * MINUTE).astimezone(zone).date())
        if day_matches(ends[0]) or day_matches(ends[1]):
            for m in range(60):
                instant = hour + m * MINUTE
                wall = instant.astimezone(zone)
                if (
                    instant > moment
                    and wall.fold == 0
                    and wall.minute in minutes
                    and wall.hour in hours
                    and day_matches(wall.date())
                ):
                    return instant
        hour += HOUR
    return None


def offset_changes(zone: ZoneInfo, year: int) -> list[datetime]:
    """The UTC instants in `year` at which `zone` changes its offset (to the half hour)."""
    start = utc(year, 1, 1)
    instants = [start + k * HOUR / 2 for k in range(366 * 48)]
    return [
        b
        for a, b in itertools.pairwise(instants)
        if a.astimezone(zone).utcoffset() != (b.astimezone(zone).utcoffset())
    ]


CHANGES = {zone: [c for year in (2024, 2025) for c in offset_changes(zone, year)] for zone in ZONES}
Case = tuple[tuple[Field, ...], ZoneInfo, datetime]


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """An expression, a zone and a start moment: anywhere in a decade, or (half
    the time) within 12 hours of one of the zone's DST changes."""
    zone = draw(st.sampled_from(ZONES))
    near_a_change = draw(st.booleans()) and bool(CHANGES[zone])
    if near_a_change:
        change = draw(st.sampled_from(CHANGES[zone]))
        moment = change + draw(st.timedeltas(-12 * HOUR, 12 * HOUR))
    else:
        after, before = datetime(2020, 1, 1), datetime(2030, 12, 31)
        moment = draw(st.datetimes(after, before, timezones=st.just(UTC)))
    if draw(st.booleans()):
        moment = moment.replace(second=0, microsecond=0)
    return draw(expressions(near_a_change)), zone, moment


@settings(max_examples=300, deadline=None)
@given(case=cases())
def test_next_after_agrees_with_minute_by_minute_oracle(case: Case) -> None:
    parts, zone, moment = case
    expression = " ".join(text for text, _ in parts)
    (_, days), (_, months), (dow_text, _) = parts[2], parts[3], parts[4]
    month_days = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
    if dow_text == "*" and not any(d <= month_days[m] for m in months for d in days):
        with pytest.raises(CronError, match="never occurs"):
            Cron.parse(expression)
        return
    cron = Cron.parse(expression)
    assert (cron.minutes, cron.hours, cron.days, cron.months) == tuple(v for _, v in parts[:4])
    assert cron.weekdays == {d % 7 for d in parts[4][1]}
    assert (cron.day_any, cron.weekday_any) == (parts[2][0] == "*", dow_text == "*")
    tick = cron.next_after(moment, zone)
    assert tick.tzinfo is UTC and tick > moment and (tick.second, tick.microsecond) == (0, 0)
    assume(tick - moment <= ORACLE_WINDOW)  # the oracle's window
    assert tick == oracle(parts, zone, moment)
