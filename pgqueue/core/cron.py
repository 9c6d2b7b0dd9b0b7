"""Cron schedules: parse a five-field expression and compute its next tick.

Pure and deterministic, standard library only: every worker computes the same
tick from the same expression, moment and time zone (the zone's rules come
from `zoneinfo`, so workers agree as long as they share a tz database version).

Fields are ``minute hour day-of-month month day-of-week``; each is ``*``, a
number, a range ``a-b``, a step ``*/n``, ``a-b/n`` or ``a/n`` (from ``a`` to
the field's maximum), or a comma-separated list of these. Months may be named
``JAN``-``DEC`` and weekdays ``SUN``-``SAT`` (any case); weekday 0 and 7 are
both Sunday (``*`` and ``a/n`` on weekdays run to 6). The macros ``@hourly``,
``@daily``, ``@midnight``, ``@weekly``, ``@monthly``, ``@yearly`` and
``@annually`` stand for their usual expressions.

Decisions:

* Day rule, as in Vixie cron: when both day-of-month and day-of-week are
  restricted, a day matches if *either* does; when one of them is ``*``, both
  must (the ``*`` one always does). Only a bare ``*`` counts as unrestricted
  (Vixie also treats ``*/n`` so; here ``*/n`` is a restriction).
* Ticks are wall-clock minutes in the schedule's time zone. A wall time that
  does not exist (the spring-forward gap) is skipped: no tick for it that day.
  A wall time that happens twice (fall-back) ticks once, at its first
  occurrence (``fold=0``): even ``* * * * *`` is silent in the repeated hour.
* An expression that no date satisfies (``0 0 30 2 *``: February 30) is
  refused by `Cron.parse`; February 29 counts as a date.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, tzinfo

__all__ = ["Cron", "CronError"]

MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
MONTHS = {
    n: i
    for i, n in enumerate(
        ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"], 1
    )
}
WEEKDAYS = {n: i for i, n in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}
NO_NAMES: dict[str, int] = {}
# name, lowest, highest accepted, highest reached by "*" and "a/n", names
FIELDS = (
    ("minute", 0, 59, 59, NO_NAMES),
    ("hour", 0, 23, 23, NO_NAMES),
    ("day-of-month", 1, 31, 31, NO_NAMES),
    ("month", 1, 12, 12, MONTHS),
    ("day-of-week", 0, 7, 6, WEEKDAYS),
)
MONTH_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # February 29 exists
YEARS_SEARCHED = 9  # a February 29 comes at least every 8 years


class CronError(ValueError):
    """A cron expression that cannot be parsed, or that no date satisfies."""


def _error(expression: str, detail: str) -> CronError:
    return CronError(f"cron expression {expression!r}: {detail}")


def _value(text: str, field: tuple[str, int, int, int, dict[str, int]], expression: str) -> int:
    name, lowest, highest, _, names = field
    if text.isascii() and text.isdigit():
        number = int(text)
    elif text.upper() in names:
        number = names[text.upper()]
    else:
        kind = f"a number or a {name} name" if names else "a number"
        raise _error(expression, f"{name} {text!r} is not {kind}")
    if not lowest <= number <= highest:
        raise _error(expression, f"{name} {number} is out of range {lowest}-{highest}")
    return number


def _field(
    text: str, field: tuple[str, int, int, int, dict[str, int]], expression: str
) -> frozenset[int]:
    name, lowest, _, top, _ = field
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise _error(expression, f"{name} {text!r} has an empty item")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not (step_text.isascii() and step_text.isdigit()) or int(step_text) == 0:
                raise _error(expression, f"{name} step {step_text!r} is not a positive number")
            step = int(step_text)
        if base == "*":
            start, stop = lowest, top
        elif "-" in base:
            first, _, last = base.partition("-")
            start, stop = _value(first, field, expression), _value(last, field, expression)
            if start > stop:
                raise _error(expression, f"{name} range {base!r} is reversed")
        else:
            start = _value(base, field, expression)
            stop = max(start, top) if slash else start
        values.update(range(start, stop + 1, step))
    if name == "day-of-week" and 7 in values:
        values = (values - {7}) | {0}
    return frozenset(values)


@dataclass(frozen=True)
class Cron:
    """A parsed cron expression; `next_after` gives its next tick as an aware UTC datetime.

    >>> from zoneinfo import ZoneInfo
    >>> cron = Cron.parse("30 9 * * MON-FRI")
    >>> sorted(cron.weekdays), cron.day_any, cron.weekday_any
    ([1, 2, 3, 4, 5], True, False)
    >>> friday_noon = datetime(2024, 3, 8, 12, 0, tzinfo=UTC)
    >>> cron.next_after(friday_noon, ZoneInfo("Europe/Berlin"))
    datetime.datetime(2024, 3, 11, 8, 30, tzinfo=datetime.timezone.utc)
    """

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday .. 6 = Saturday
    day_any: bool
    weekday_any: bool

    @classmethod
    def parse(cls, expression: str) -> Cron:
        """Parse five fields or a macro; raise `CronError` naming the bad field and value."""
        if not isinstance(expression, str):
            raise CronError(f"cron expression must be a str, not {type(expression).__name__}")
        text = expression.strip()
        if text.startswith("@"):
            if text.lower() not in MACROS:
                raise _error(expression, f"unknown macro; known: {', '.join(MACROS)}")
            text = MACROS[text.lower()]
        parts = text.split()
        if len(parts) != 5:
            names = " ".join(field[0] for field in FIELDS)
            raise _error(expression, f"expected 5 fields ({names}), got {len(parts)}")
        minutes, hours, days, months, weekdays = (
            _field(part, field, expression) for part, field in zip(parts, FIELDS, strict=True)
        )
        day_any, weekday_any = parts[2] == "*", parts[4] == "*"
        if weekday_any and not any(day <= MONTH_DAYS[m] for m in months for day in days):
            raise _error(expression, f"day-of-month {parts[2]} never occurs in month {parts[3]}")
        return cls(expression, minutes, hours, days, months, weekdays, day_any, weekday_any)

    def next_after(self, moment: datetime, tz: tzinfo) -> datetime:
        """The first tick strictly after aware `moment`, for wall clocks in `tz` (a ZoneInfo)."""
        if moment.utcoffset() is None:
            raise ValueError(f"moment must be an aware datetime, not {moment!r}")
        hours, minutes = sorted(self.hours), sorted(self.minutes)
        try:
            for day in self._days(moment.astimezone(tz).date()):
                for hour in hours:
                    # Existing wall times map to instants in order: skip hours already over.
                    last = _instant(day, hour, minutes[-1], tz)
                    if last is not None and last <= moment:
                        continue
                    for minute in minutes:
                        tick = _instant(day, hour, minute, tz)
                        if tick is not None and tick > moment:
                            return tick
        except OverflowError:  # past the year 9999
            pass
        raise _error(self.expression, f"no tick within {YEARS_SEARCHED} years after {moment}")

    def _days(self, first: date) -> Iterator[date]:
        """The matching days from `first` on, month by month."""
        either = not (self.day_any or self.weekday_any)
        for year in range(first.year, min(first.year + YEARS_SEARCHED, 10000)):
            for month in sorted(self.months):
                if (year, month) < (first.year, first.month):
                    continue
                start = first.day if (year, month) == (first.year, first.month) else 1
                for dom in range(start, calendar.monthrange(year, month)[1] + 1):
                    day = date(year, month, dom)
                    by_dom, by_dow = dom in self.days, (day.weekday() + 1) % 7 in self.weekdays
                    if (by_dom or by_dow) if either else (by_dom and by_dow):
                        yield day


def _instant(day: date, hour: int, minute: int, tz: tzinfo) -> datetime | None:
    """The UTC instant of a wall time's first occurrence, None if the wall time is skipped."""
    wall = datetime.combine(day, time(hour, minute), tz)
    instant = wall.astimezone(UTC)
    if instant.astimezone(tz).replace(tzinfo=None) != wall.replace(tzinfo=None):
        return None
    return instant
