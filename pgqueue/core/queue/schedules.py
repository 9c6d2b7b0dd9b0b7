"""The statements of schedules (docs/schedules.md): register, look, tick,
list, pause and trigger. What a schedule is and when it ticks is
`pgqueue.core.schedules`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from psycopg import sql

from ..jobs import DuplicateJob
from ..plans import Operation, Plan, Query, Rows, fetch
from ..schedules import (
    Schedule,
    ScheduleState,
    Tick,
    UnknownSchedule,
    unique_key_of,
    validate_schedule_name,
)
from ..schema.predicates import UNIQUE_PREDICATES
from .table import FeatureStatements, Table

__all__ = [
    "ScheduleStatements",
    "register_schedules",
    "schedule_clock",
    "schedule_states",
    "set_schedule_paused",
    "tick_schedule",
    "trigger_schedule",
]

# How often a trigger of a schedule with overlap=False tries again when its
# previous job left the "active" scope between the insert and the look-up.
UNIQUE_TRIES: Final = 5

# A worker registers its schedules when it starts. A new row starts at now():
# ticks before a schedule existed are not enqueued. A known one keeps its
# last tick and its pause; its definition is rewritten only when it changed,
# so that workers restarting write nothing.
REGISTER_SCHEDULE: Final = """
INSERT INTO {schedules} AS s (name, kind, cron, every, tz, payload, queue, priority, overlap,
                              last_tick)
VALUES (%(name)s, %(kind)s, %(cron)s, %(every)s::interval, %(tz)s, %(payload)s::jsonb,
        %(queue)s, %(priority)s, %(overlap)s, now())
ON CONFLICT (name) DO UPDATE
   SET kind = EXCLUDED.kind, cron = EXCLUDED.cron, every = EXCLUDED.every, tz = EXCLUDED.tz,
       payload = EXCLUDED.payload, queue = EXCLUDED.queue, priority = EXCLUDED.priority,
       overlap = EXCLUDED.overlap, last_tick = coalesce(s.last_tick, EXCLUDED.last_tick),
       updated_at = now()
 WHERE (s.kind, s.cron, s.every, s.tz, s.payload, s.queue, s.priority, s.overlap,
        s.last_tick IS NULL)
       IS DISTINCT FROM (EXCLUDED.kind, EXCLUDED.cron, EXCLUDED.every, EXCLUDED.tz,
                         EXCLUDED.payload, EXCLUDED.queue, EXCLUDED.priority, EXCLUDED.overlap,
                         false)"""
# The scheduler's look: the database's clock (workers' clocks may be skewed)
# and where its schedules stand. One row, even for none.
SCHEDULE_CLOCK: Final = """
SELECT now(), coalesce(array_agg(name), '{{}}'), coalesce(array_agg(last_tick), '{{}}')
  FROM {schedules} WHERE name = ANY(%(names)s::text[])"""
# THE TICK: the schedule's row moves on to the tick and the tick's job is
# written by one statement. Workers racing for one tick queue on the row's
# lock; each that comes after the first finds last_tick no longer before the
# tick, updates nothing and writes no job. A paused schedule records its
# ticks without jobs. With overlap=False ("free"), a tick while the
# schedule's previous job is pending or running records the tick without a
# job (the "active" unique key).
TICK: Final = """
WITH free AS MATERIALIZED (
    SELECT {free} AS free
), tick AS (
    UPDATE {schedules} AS s
       SET last_tick = %(tick)s,
           last_job_id = CASE WHEN s.paused OR NOT f.free THEN s.last_job_id
                         ELSE nextval(pg_get_serial_sequence(%(table)s, 'id')::regclass) END
      FROM free AS f
     WHERE s.name = %(name)s AND s.last_tick < %(tick)s
    RETURNING s.paused, f.free, s.last_job_id
), job AS (
    INSERT INTO {table} (id, kind, payload, run_at, queue, priority, unique_key, unique_scope)
    SELECT last_job_id, %(kind)s, %(payload)s::jsonb, %(tick)s, %(queue)s, %(priority)s,
           {unique}
      FROM tick WHERE NOT paused AND free{on_conflict}
    RETURNING id, kind
)
SELECT EXISTS (SELECT FROM tick), coalesce((SELECT paused FROM tick), false),
       (SELECT id FROM job), now(), (SELECT pg_notify(%(channel)s, kind)::text FROM job)"""
HOLDER: Final = (
    """NOT EXISTS (SELECT FROM {table} WHERE unique_key = %(unique_key)s AND {active})"""
)
# Every schedule, for `schedules()` and ``pgqueue cron list``.
SCHEDULE_STATES: Final = """
SELECT name, kind, cron, every, tz, payload, queue, priority, overlap, paused, last_tick,
       last_job_id, updated_at, now()
  FROM {schedules} ORDER BY name"""
# Pause or resume a schedule. A resumed one goes on from now: the ticks it
# missed while paused are not made up for.
SET_SCHEDULE_PAUSED: Final = """
UPDATE {schedules}
   SET paused = %(paused)s,
       last_tick = CASE WHEN paused AND NOT %(paused)s THEN greatest(last_tick, now())
                   ELSE last_tick END
 WHERE name = %(name)s
RETURNING name"""
# An operator's run of a schedule now, from its row: a job like its ticks'
# (overlap=False respected), not a tick (last_tick unchanged).
TRIGGER_SCHEDULE: Final = """
WITH s AS (
    SELECT kind, payload, queue, priority, overlap FROM {schedules} WHERE name = %(name)s
), job AS (
    INSERT INTO {table} (kind, payload, queue, priority, unique_key, unique_scope)
    SELECT kind, payload, queue, priority, CASE WHEN overlap THEN NULL ELSE %(unique_key)s END,
           CASE WHEN overlap THEN NULL ELSE 'active' END
      FROM s
    ON CONFLICT (unique_key) WHERE {active} DO NOTHING
    RETURNING id, kind
)
SELECT EXISTS (SELECT FROM s), (SELECT id FROM job),
       (SELECT pg_notify(%(channel)s, kind)::text FROM job)"""


@dataclass(frozen=True, slots=True)
class ScheduleStatements(FeatureStatements):
    register_schedule: bytes
    schedule_clock: bytes
    # overlap -> the tick.
    schedule_ticks: dict[bool, bytes]
    schedule_states: bytes
    set_schedule_paused: bytes
    trigger_schedule: bytes

    @classmethod
    def special(cls, t: Table) -> dict[str, Any]:
        active = sql.SQL(UNIQUE_PREDICATES["active"])
        on_conflict = sql.SQL("\n    ON CONFLICT (unique_key) WHERE {} DO NOTHING").format(active)
        return {
            "schedule_ticks": {
                True: t.render(
                    TICK,
                    free=sql.SQL("true"),
                    unique=sql.SQL("NULL, NULL"),
                    on_conflict=sql.SQL(""),
                ),
                False: t.render(
                    TICK,
                    free=t.compose(HOLDER, active=active),
                    unique=sql.SQL("%(unique_key)s, 'active'"),
                    on_conflict=on_conflict,
                ),
            },
            "trigger_schedule": t.render(TRIGGER_SCHEDULE, active=active),
        }


def register_schedules(s: ScheduleStatements, schedules: Sequence[Schedule]) -> Operation[None]:
    """Write a worker's schedules into the table (new ones start now)."""
    rows = [
        {"name": d.name, "kind": d.kind, "cron": d.cron and d.cron.expression,
         "every": d.every, "tz": d.tz, "payload": d.payload_json, "queue": d.queue,
         "priority": d.priority, "overlap": d.overlap}
        for d in schedules
    ]  # fmt: skip

    def plan() -> Plan[None]:
        for row in rows:
            yield Query(s.register_schedule, row)

    return Operation(plan(), atomic=True)


def schedule_clock(
    s: ScheduleStatements, names: Sequence[str]
) -> Operation[tuple[datetime, dict[str, datetime | None]]]:
    """The database's clock, and the last tick of each schedule named that has a row."""
    return fetch(s.schedule_clock, {"names": list(names)}, _clock)


def _clock(rows: Rows) -> tuple[datetime, dict[str, datetime | None]]:
    [(now, found, ticks)] = rows
    return now, dict(zip(found, ticks, strict=True))


def tick_schedule(
    s: ScheduleStatements, channel: str, regclass: str, schedule: Schedule, tick: datetime
) -> Operation[Tick]:
    """Record `tick` and enqueue its job, in one statement, unless it is recorded already.
    `regclass`: the table's name as pg_get_serial_sequence reads it (quoted)."""
    params = {
        "name": schedule.name, "tick": tick, "table": regclass,
        "kind": schedule.kind, "payload": schedule.payload_json, "queue": schedule.queue,
        "priority": schedule.priority, "unique_key": schedule.unique_key,
        "channel": channel,
    }  # fmt: skip
    return fetch(s.schedule_ticks[schedule.overlap], params, _tick)


def _tick(rows: Rows) -> Tick:
    [(won, paused, job_id, now, _)] = rows
    return Tick(won, job_id, paused, now)


def schedule_states(s: ScheduleStatements) -> Operation[list[ScheduleState]]:
    """Every schedule in the table, by name, with its next tick by the database's clock."""
    return fetch(s.schedule_states, None, lambda rows: list(map(ScheduleState.from_row, rows)))


def set_schedule_paused(s: ScheduleStatements, name: str, paused: bool) -> Operation[None]:
    """Pause a schedule (its ticks enqueue nothing) or resume it (from now on)."""
    name = validate_schedule_name(name)
    params = {"name": name, "paused": paused}

    def plan() -> Plan[None]:
        if not (yield Query(s.set_schedule_paused, params)):
            raise UnknownSchedule(name)

    return Operation(plan())


def trigger_schedule(
    s: ScheduleStatements, active_holder: bytes, channel: str, name: str
) -> Operation[int]:
    """Enqueue a schedule's job now, from its row; not a tick. With overlap=False,
    `DuplicateJob` if its previous job is still pending or running (which
    `active_holder`, the holder of an "active" unique key, finds)."""
    name = validate_schedule_name(name)
    key = unique_key_of(name)
    params = {"name": name, "unique_key": key, "channel": channel}

    def plan() -> Plan[int]:
        for _ in range(UNIQUE_TRIES):
            [(found, job_id, _)] = yield Query(s.trigger_schedule, params)
            if not found:
                raise UnknownSchedule(name)
            if job_id is not None:
                return int(job_id)
            rows = yield Query(active_holder, params)
            if rows:
                raise DuplicateJob(key, int(rows[0][0]))
        raise RuntimeError(f"unique key {key!r} changed hands {UNIQUE_TRIES} times")

    return Operation(plan())
