"""Schedules: what a worker enqueues on a cron or an interval, and when. No I/O.

A schedule's *ticks* follow from its definition alone, never from when a
worker looks: every worker that runs a schedule computes the same ticks,
and the database records the last one enqueued (``<table>_schedules``), so
that each tick becomes exactly one job however many workers race for it
(see `pgqueue.core.sql`, ``schedule_ticks``).

* ``cron``: the wall-clock minutes of a five-field expression in the
  schedule's time zone (`pgqueue.core.cron`: the spring-forward gap has no
  tick, a repeated wall time ticks once).
* ``every``: the multiples of the interval since the Unix epoch, in UTC
  (``every=timedelta(hours=1)`` ticks on the hour, ``timedelta(days=1)`` at
  midnight UTC), so that every worker agrees whenever it started.

Decisions where the specification is silent:

* A new schedule starts at its registration: the ticks before it are not
  enqueued (its row's ``last_tick`` is the moment it was first registered).
* After downtime (no worker ran the schedule), at most ``backfill`` of the
  missed ticks are enqueued, the latest ones; the older ones are skipped
  and the worker says so in its log.
* `due` needs the previous tick of a cron expression, which `Cron` does not
  compute: it is found by bisection on `Cron.next_after` (monotone in its
  argument), about forty calls, rather than by walking every minute since
  the last tick (a week of a ``* * * * *`` schedule is 10,080 calls).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .cron import Cron
from .jobs import (
    DEFAULT_QUEUE,
    MAX_DELAY,
    encode_payload,
    refuse_control,
    validate_kind,
    validate_name,
    validate_priority,
    validate_queue,
)

__all__ = [
    "EPOCH",
    "MAX_BACKFILL",
    "MIN_EVERY",
    "Due",
    "Schedule",
    "ScheduleState",
    "Tick",
    "UnknownSchedule",
    "next_tick_of",
    "unique_key_of",
    "validate_schedule",
    "validate_schedule_name",
    "zone",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MIN_EVERY = timedelta(seconds=1)
MAX_BACKFILL = 1000
# The unique key of a schedule's jobs when overlap=False ("active" scope).
UNIQUE_KEY_PREFIX = "schedule:"
_MICROSECOND = timedelta(microseconds=1)


class UnknownSchedule(LookupError):
    """No schedule of that name is in the table (no worker registered it)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no schedule named {name!r} (a worker registers it when it starts)")
        self.name = name


@dataclass(frozen=True, slots=True)
class Due:
    """What a schedule has to enqueue at a given moment (`Schedule.due`)."""

    ticks: tuple[datetime, ...]
    """The ticks to enqueue now, oldest first (at most ``backfill``)."""
    skipped: tuple[datetime, datetime] | None
    """The first and last of the missed ticks left out by ``backfill``, if any."""
    next_tick: datetime
    """The first tick after the moment given."""


@dataclass(frozen=True, slots=True)
class Tick:
    """What one tick statement did (`QueueCore.tick_schedule`)."""

    won: bool
    """This call recorded the tick; False: another worker did (or a later tick was recorded)."""
    job_id: int | None
    """The job enqueued; None if the tick was lost, paused or skipped by ``overlap=False``."""
    paused: bool
    now: datetime
    """The database's clock when the statement ran."""


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """A schedule as its table row says, for `schedules()` and ``pgqueue cron list``."""

    name: str
    kind: str
    cron: str | None
    every: timedelta | None
    tz: str
    payload: Any
    queue: str
    priority: int
    overlap: bool
    paused: bool
    last_tick: datetime | None
    """The last tick recorded: enqueued, skipped (overlap, paused), or the registration."""
    last_job_id: int | None
    """The job of the last tick that enqueued one (it may have finished and be gone)."""
    updated_at: datetime
    next_tick: datetime | None
    """The first tick after now by the stored definition (None if it cannot be computed)."""

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> ScheduleState:
        """A row of ``Statements.schedule_states``: the columns, then the database's now."""
        (name, kind, cron, every, tz, payload, queue, priority, overlap, paused, last_tick,
         last_job_id, updated_at, now) = row  # fmt: skip
        next_tick = next_tick_of(cron, every, tz, now)
        return cls(name, kind, cron, every, tz, payload, queue, priority, overlap, paused,
                   last_tick, last_job_id, updated_at, next_tick)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Schedule:
    """A validated schedule (`validate_schedule`); its ticks are `due`'s business."""

    name: str
    kind: str
    cron: Cron | None
    every: timedelta | None
    tz: str
    zone: tzinfo
    payload_json: str
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    overlap: bool = True
    backfill: int = 1

    @property
    def unique_key(self) -> str | None:
        """The key that keeps one job of this schedule active at a time, if overlap=False."""
        return None if self.overlap else unique_key_of(self.name)

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after aware `moment`."""
        # In UTC: arithmetic on two datetimes of one zone ignores its offset changes.
        moment = moment.astimezone(UTC)
        if self.every is not None:
            steps = (moment - EPOCH) // self.every + 1
            return EPOCH + steps * self.every
        assert self.cron is not None
        return self.cron.next_after(moment, self.zone)

    def latest_at_or_before(self, moment: datetime, after: datetime) -> datetime | None:
        """The last tick in ``(after, moment]``, or None if there is none."""
        moment, after = moment.astimezone(UTC), after.astimezone(UTC)
        if self.every is not None:
            tick = EPOCH + (moment - EPOCH) // self.every * self.every
            return tick if tick > after else None
        first = self.next_after(after)
        if first > moment:
            return None
        if self.next_after(first) > moment:
            return first  # the usual case: one tick since `after`
        # Bisect for the boundary B: a t < B has its next tick <= moment, a t >= B
        # has not. B is the latest tick (ticks are whole microseconds, as datetimes).
        low, high = first, moment
        while high - low > _MICROSECOND:
            middle = low + (high - low) / 2
            if self.next_after(middle) <= moment:
                low = middle
            else:
                high = middle
        return self.next_after(low)

    def due(self, last_tick: datetime | None, now: datetime) -> Due:
        """The ticks after `last_tick` and up to `now` to enqueue, at most ``backfill``.

        ``last_tick`` None (a row that lost its start) counts from `now`: nothing is due.
        """
        now = now.astimezone(UTC)
        after = now if last_tick is None else last_tick.astimezone(UTC)
        found: list[datetime] = []  # newest first, one more than backfill if ticks were missed
        bound = now
        while len(found) <= self.backfill:
            tick = self.latest_at_or_before(bound, after)
            if tick is None:
                break
            found.append(tick)
            bound = tick - _MICROSECOND
        skipped = None
        if len(found) > self.backfill:
            skipped = (self.next_after(after), found.pop())
        return Due(tuple(reversed(found)), skipped, self.next_after(now))


def unique_key_of(name: str) -> str:
    """The unique key (``active`` scope) of the jobs of a schedule with overlap=False."""
    return UNIQUE_KEY_PREFIX + name


def validate_schedule_name(name: object) -> str:
    """A schedule's name: non-empty text, as a queue's name."""
    return refuse_control(validate_name(name, "schedule name"), "schedule name")


def zone(tz: object) -> tzinfo:
    """The time zone named `tz` (an IANA name such as ``Europe/Berlin``), or ValueError."""
    if not isinstance(tz, str):
        raise TypeError(f"tz must be a time zone name (str), not {type(tz).__name__}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        if tz == "UTC":  # no tz database on this system: UTC needs none
            return UTC
        raise ValueError(
            f"unknown time zone {tz!r}: give an IANA name such as 'UTC' or 'Europe/Berlin'"
        ) from None


def validate_schedule(
    kind: object,
    *,
    cron: object = None,
    every: object = None,
    payload: Any = None,
    name: object = None,
    tz: object = "UTC",
    queue: object = DEFAULT_QUEUE,
    priority: object = 0,
    overlap: object = True,
    backfill: object = 1,
) -> Schedule:
    """Check a schedule's arguments; raise TypeError or ValueError on the first bad one.

    >>> validate_schedule("report", cron="0 6 * * MON", tz="Europe/Berlin").name
    'report'
    >>> validate_schedule("ping", cron="* * * * *", every=timedelta(minutes=1))
    Traceback (most recent call last):
    ...
    ValueError: give cron or every, not both
    """
    kind = validate_kind(kind)
    name = kind if name is None else validate_schedule_name(name)
    if (cron is None) == (every is None):
        raise ValueError("give cron or every, not both" if cron is not None else
                         "give cron (a five-field expression) or every (a timedelta)")  # fmt: skip
    parsed = None
    if cron is not None:
        parsed = Cron.parse(cron)  # type: ignore[arg-type]  # it refuses a non-str
    elif not isinstance(every, timedelta):
        raise TypeError(f"every must be a timedelta, not {type(every).__name__}")
    elif not MIN_EVERY <= every <= MAX_DELAY:
        raise ValueError(f"every must be from {MIN_EVERY} to {MAX_DELAY.days} days, got {every}")
    zone_info = zone(tz)
    assert isinstance(tz, str)
    if every is not None and tz != "UTC":
        raise ValueError(
            "tz applies to cron schedules only: every= ticks are multiples of the interval "
            "since the Unix epoch in UTC (use cron for wall-clock times in a zone)"
        )
    if not isinstance(overlap, bool):
        raise TypeError(f"overlap must be a bool, not {type(overlap).__name__}")
    if isinstance(backfill, bool) or not isinstance(backfill, int):
        raise TypeError(f"backfill must be an int, not {type(backfill).__name__}")
    if not 1 <= backfill <= MAX_BACKFILL:
        raise ValueError(f"backfill must be from 1 to {MAX_BACKFILL}, got {backfill}")
    return Schedule(
        name=name,
        kind=kind,
        cron=parsed,
        every=every,  # type: ignore[arg-type]  # checked above
        tz=tz,
        zone=zone_info,
        payload_json=encode_payload(payload),
        queue=validate_queue(queue),
        priority=validate_priority(priority),
        overlap=overlap,
        backfill=backfill,
    )


def next_tick_of(
    cron: str | None, every: timedelta | None, tz: str, now: datetime
) -> datetime | None:
    """The next tick of a stored schedule row, or None if the row cannot be read as one."""
    try:
        schedule = validate_schedule("x", cron=cron, every=every, tz=tz)
    except (TypeError, ValueError):
        return None
    return schedule.next_after(now)
