"""The statements of an operator's actions (``pgqueue jobs``, ``pgqueue dead``):
look a job up, list jobs, revive dead ones, purge them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from psycopg import sql

from .table import Table

__all__ = ["OperatorStatements"]

GET: Final = "SELECT {cols} FROM {table} WHERE id = %s"

# An operator revives dead jobs: a fresh set of attempts, due now. A unique
# job whose key another job holds now stays dead (and so does all but the
# newest of several dead ones with one key): reviving it would break the
# key's rule. `retry` counts what it revived.
REVIVABLE: Final = """
SELECT DISTINCT ON (t.unique_key, t.unique_scope, CASE WHEN t.unique_key IS NULL THEN t.id END)
       t.id FROM {table} AS t
 WHERE t.status = 'dead' AND {which}
   AND NOT EXISTS (
       SELECT FROM {table} AS o
        WHERE o.unique_key = t.unique_key AND o.unique_scope = t.unique_scope AND o.id <> t.id
          AND ((o.unique_scope = 'queued' AND o.status = 'pending' AND o.attempts = 0)
               OR (o.unique_scope = 'active' AND o.status IN ('pending', 'running'))))
 ORDER BY t.unique_key, t.unique_scope, CASE WHEN t.unique_key IS NULL THEN t.id END,
          t.id DESC"""
REVIVE: Final = """
UPDATE {table}
   SET status = 'pending', attempts = 0, run_at = now(), locked_at = NULL, locked_by = NULL
 WHERE id IN ({revivable})
RETURNING id, kind"""
RETRY: Final = """
WITH revived AS ({revive})
SELECT id, pg_notify(%(channel)s, kind)::text FROM revived"""
# Every dead job (of some kinds) back to pending, as `retry` does it; one
# notification per kind revived, not one per job.
RETRY_DEAD: Final = """
WITH revived AS ({revive}), by_kind AS (
    SELECT kind, count(*) AS n FROM revived GROUP BY kind
)
SELECT coalesce(sum(n), 0)::bigint, count(pg_notify(%(channel)s, kind)) FROM by_kind"""

# A page of jobs in id order, filtered by status, kinds and queues (NULL: any).
JOBS: Final = """
SELECT {cols} FROM {table}
 WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
   AND (%(kinds)s::text[] IS NULL OR kind = ANY(%(kinds)s::text[]))
   AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
   AND (%(after_id)s::bigint IS NULL OR id > %(after_id)s::bigint)
 ORDER BY id
 LIMIT %(limit)s"""

# Dead jobs that died before the cut-off go for good (a dead job's run_at is
# when it died). With history on, each purged job is copied there by the
# same statement.
PURGE_DEAD: Final = """
WITH purged AS (
    DELETE FROM {table}
     WHERE status = 'dead' AND run_at < now() - %(older_than)s::interval
       AND (%(kinds)s::text[] IS NULL OR kind = ANY(%(kinds)s::text[]))
    RETURNING {gone}
){keep}
SELECT count(*) FROM purged"""


def reviving(t: Table, which: str) -> sql.Composable:
    """The revive of the dead jobs `which` selects (of rows ``t``)."""
    return t.compose(REVIVE, revivable=t.compose(REVIVABLE, which=sql.SQL(which)))


@dataclass(frozen=True, slots=True)
class OperatorStatements:
    get: bytes
    retry: bytes
    retry_dead: bytes
    jobs: bytes
    purge_dead: bytes

    @classmethod
    def of(cls, t: Table) -> OperatorStatements:
        every_kind = "(%(kinds)s::text[] IS NULL OR t.kind = ANY(%(kinds)s::text[]))"
        return cls(
            get=t.render(GET),
            retry=t.render(RETRY, revive=reviving(t, "t.id = ANY(%(ids)s::bigint[])")),
            retry_dead=t.render(RETRY_DEAD, revive=reviving(t, every_kind)),
            jobs=t.render(JOBS),
            purge_dead=t.render(PURGE_DEAD, keep=t.history_copy("purged", "dead")),
        )
