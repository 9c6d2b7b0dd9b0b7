"""The statements of limits (docs/limits.md): a key's concurrency limit
and rate, its slots, and where every key stands. The claim takes the slots
(`pgqueue.core.sql`); the statements that end a job free them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ..jobs import validate_limit_key, validate_rate
from ..plans import Operation, Rows, execute, fetch
from .table import FeatureStatements

__all__ = ["LimitState", "LimitStatements", "limit_states", "set_limit", "set_rate"]


@dataclass(frozen=True, slots=True)
class LimitStatements(FeatureStatements):
    ensure_slots: bytes
    set_limit: bytes
    set_rate: bytes
    limit_states: bytes


# A limited job's key gets its first slot when the job is enqueued (one job
# at a time until `set_limit` says otherwise).
ENSURE_SLOTS: Final = """
INSERT INTO {slots} (limit_key, slot) SELECT unnest(%(keys)s::text[]), 1
ON CONFLICT DO NOTHING"""
# set_limit: the limit, and slots up to it. Slots above a lowered limit are
# no longer taken (the claim reads the limit); those free now go, those taken
# go once free, at the next set_limit.
SET_LIMIT: Final = """
WITH limit_row AS (
    INSERT INTO {limits} AS m (limit_key, max_running) VALUES (%(key)s, %(n)s)
    ON CONFLICT (limit_key) DO UPDATE SET max_running = EXCLUDED.max_running, changed_at = now()
    RETURNING 1
), added AS (
    INSERT INTO {slots} (limit_key, slot) SELECT %(key)s, generate_series(1, %(n)s)
    ON CONFLICT DO NOTHING RETURNING 1
), removed AS (
    DELETE FROM {slots} WHERE limit_key = %(key)s AND slot > %(n)s AND job_id IS NULL RETURNING 1
)
SELECT (SELECT count(*) FROM limit_row), (SELECT count(*) FROM added),
       (SELECT count(*) FROM removed), pg_notify(%(channel)s, '')"""
# set_rate: a key's token bucket (full when new), and its first slot (one job
# at a time until set_limit). A new rate keeps the tokens the old one had
# filled, up to the new burst; None takes it away.
SET_RATE: Final = """
WITH rate_row AS (
    INSERT INTO {limits} AS m (limit_key, max_running, per_second, burst, tokens, refilled_at)
    VALUES (%(key)s, NULL, %(per_second)s::double precision, %(burst)s::integer,
            %(burst)s::integer, now())
    ON CONFLICT (limit_key) DO UPDATE
       SET per_second = EXCLUDED.per_second, burst = EXCLUDED.burst,
           tokens = CASE WHEN m.per_second IS NULL OR EXCLUDED.per_second IS NULL
                         THEN EXCLUDED.tokens
                         ELSE least(EXCLUDED.burst, m.tokens + m.per_second
                                    * extract(epoch FROM now() - m.refilled_at)::double precision)
                    END,
           refilled_at = EXCLUDED.refilled_at, changed_at = now()
    RETURNING 1
), first_slot AS (
    INSERT INTO {slots} (limit_key, slot) VALUES (%(key)s, 1) ON CONFLICT DO NOTHING RETURNING 1
)
SELECT (SELECT count(*) FROM rate_row), (SELECT count(*) FROM first_slot),
       pg_notify(%(channel)s, '')"""
# Every key with a limit or a slot: its limit, running and waiting jobs, and
# its rate with the tokens it has now.
LIMIT_STATES: Final = """
WITH keys AS (
    SELECT limit_key FROM {limits} UNION SELECT DISTINCT limit_key FROM {slots}
)
SELECT k.limit_key, m.max_running,
       (SELECT count(*) FROM {slots} AS s WHERE s.limit_key = k.limit_key AND s.job_id IS NOT NULL),
       (SELECT count(*) FROM {table} AS t
         WHERE t.status = 'pending' AND t.limit_key = k.limit_key),
       m.per_second, m.burst,
       least(m.burst, m.tokens + m.per_second
             * extract(epoch FROM now() - m.refilled_at)::double precision)
  FROM keys AS k LEFT JOIN {limits} AS m ON m.limit_key = k.limit_key
 ORDER BY 1"""


@dataclass(frozen=True, slots=True)
class LimitState:
    """A concurrency limit as `limits()` reports it."""

    key: str
    max_running: int  # 1 until set_limit sets it
    running: int
    waiting: int
    set: bool  # whether set_limit set it
    per_second: float | None = None  # its rate, if set_rate set one
    burst: int | None = None
    tokens: float | None = None  # jobs it may start now, by its rate (whole ones count)


def set_limit(s: LimitStatements, channel: str, key: str, max_running: int) -> Operation[None]:
    """At most ``max_running`` jobs with ``limit_key=key`` run at once."""
    key = validate_limit_key(key)
    if isinstance(max_running, bool) or not isinstance(max_running, int):
        raise TypeError(f"a limit must be an int, not {type(max_running).__name__}")
    if not 0 <= max_running <= 100_000:
        raise ValueError(f"a limit must be from 0 to 100000 running jobs, got {max_running}")
    return execute(s.set_limit, {"key": key, "n": max_running, "channel": channel})


def set_rate(
    s: LimitStatements, channel: str, key: str, per_second: float | None, burst: int | None
) -> Operation[None]:
    """Jobs with ``limit_key=key`` start at most ``per_second`` a second over
    all workers, ``burst`` at once after a pause (default: one second's
    worth); None removes the rate."""
    key = validate_limit_key(key)
    per_second, burst = validate_rate(per_second, burst)
    params = {"key": key, "per_second": per_second, "burst": burst, "channel": channel}
    return execute(s.set_rate, params)


def limit_states(s: LimitStatements) -> Operation[list[LimitState]]:
    """Every limit key in use or set, by name."""
    return fetch(s.limit_states, None, _limit_states)


def _limit_states(rows: Rows) -> list[LimitState]:
    return [
        LimitState(key, 1 if limit is None else limit, running, waiting, limit is not None, *rate)
        for key, limit, running, waiting, *rate in rows
    ]
