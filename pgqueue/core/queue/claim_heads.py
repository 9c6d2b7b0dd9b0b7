"""The claim's walk after heads (`pgqueue.core.heads`): where a worker's
claim given heads starts each level, and how its probes step over the
entries behind the heads. `pgqueue.core.queue.claim` splices these in when
`ClaimSpec.heads`; without, the claim is the one it was before heads.
"""

from __future__ import annotations

from typing import Final

from psycopg import sql

from .table import Table

__all__ = [
    "AFTER_HEAD",
    "HEADS_CTE",
    "LEVEL_HEAD",
    "every_queue_after_heads",
    "levels_after_heads",
]

# A worker's claim may be given heads (`pgqueue.core.heads`, a JSON array: the
# planner guesses as many rows of it whatever it holds, so that the
# statement's generic plan costs what its custom plans do and is kept; from
# arrays, unnest's row estimate followed the values, and every turn was
# planned anew, 1.5 ms). For a level, the (run_at, id) of the last job it
# claimed there. Entries of the level up to its head are taken as gone (under
# a held snapshot they are dead entries, which every probe would otherwise
# step over one by one): the pick starts after the head, and the walks below
# never step into those entries; a level with a head is a level, whether or
# not a live job is left in it. A claim without heads (`ClaimSpec.heads`)
# leaves all of this out: its claim is the plain one (`pgqueue.core.queue.claim`).
HEADS_CTE: Final = """
heads(queue, priority, run_at, id) AS (
    SELECT * FROM jsonb_to_recordset(%(heads)s::jsonb)
        AS h(queue text, priority smallint, run_at timestamptz, id bigint)),"""
# The queues with pending jobs, each probe bounded by the next queue's first
# head (before: that head's level and all above it).
EVERY_QUEUE_AFTER_HEADS: Final = """
found(queue) AS (
    SELECT {first_queue}
      FROM (SELECT (SELECT h.queue FROM heads AS h
                     ORDER BY h.queue, h.priority LIMIT 1) AS queue,
                   (SELECT h.priority FROM heads AS h
                     ORDER BY h.queue, h.priority LIMIT 1) AS priority) AS z
  UNION ALL
    SELECT {next_queue}
      FROM found AS f
      LEFT JOIN LATERAL (SELECT h.queue, h.priority FROM heads AS h WHERE h.queue > f.queue
                          ORDER BY h.queue, h.priority LIMIT 1) AS z ON true
     WHERE f.queue IS NOT NULL)"""
QUEUE_PROBE: Final = """CASE WHEN z.queue IS NULL THEN
           (SELECT min(queue) FROM {table}
             WHERE status = 'pending' AND limit_key IS NULL{after})
         ELSE coalesce(
           (SELECT min(queue) FROM {table}
             WHERE status = 'pending' AND limit_key IS NULL{after}
               AND (queue, priority) < (z.queue, z.priority)),
           z.queue) END"""
# Each queue's levels, highest first, each probe bounded below by the head of
# the next level down that has one.
LEVELS_AFTER_HEADS: Final = """
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM {queues} AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT l.queue, {next_level}
      FROM (SELECT queue, 32767::smallint AS priority FROM served) AS l{head_below}
  UNION ALL
    SELECT l.queue, {next_level}
      FROM levels AS l{head_below}
     WHERE l.priority IS NOT NULL)"""
HEAD_BELOW: Final = """
      LEFT JOIN LATERAL (SELECT h.priority, h.run_at, h.id FROM heads AS h
                          WHERE h.queue = l.queue AND h.priority < l.priority
                          ORDER BY h.priority DESC LIMIT 1) AS z ON true"""
NEXT_LEVEL: Final = """coalesce(
           (SELECT max(priority) FROM {table}
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority
               AND (priority, run_at, id) > (coalesce(z.priority, (-32768)::smallint),
                                             coalesce(z.run_at, '-infinity'::timestamptz),
                                             coalesce(z.id, 0::bigint))),
           z.priority)"""
# A level's head, for the pick (none: from the level's start).
LEVEL_HEAD: Final = """
             LEFT JOIN heads AS h ON h.queue = l.queue AND h.priority = l.priority"""
AFTER_HEAD: Final = """
                     AND (run_at, id) > (coalesce(h.run_at, '-infinity'::timestamptz),
                                         coalesce(h.id, 0::bigint))"""


def every_queue_after_heads(t: Table) -> sql.Composable:
    """The queues with pending jobs, found past the heads."""
    return t.compose(
        EVERY_QUEUE_AFTER_HEADS,
        first_queue=t.compose(QUEUE_PROBE, after=sql.SQL("")),
        next_queue=t.compose(QUEUE_PROBE, after=sql.SQL("\n               AND queue > f.queue")),
    )


def levels_after_heads(t: Table) -> sql.Composable:
    """Each served queue's levels, highest first, found past the heads."""
    return t.compose(
        LEVELS_AFTER_HEADS, next_level=t.compose(NEXT_LEVEL), head_below=sql.SQL(HEAD_BELOW)
    )
