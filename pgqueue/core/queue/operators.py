"""The statements of an operator's actions (``pgqueue jobs``, ``pgqueue dead``):
look a job up, list jobs, revive dead ones, purge them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, TypedDict, Unpack

from psycopg import sql

from ..jobs import (
    Job,
    JobStatus,
    validate_age,
    validate_ids,
    validate_job_id,
    validate_kinds,
    validate_limit,
    validate_queues,
    validate_status,
)
from ..plans import Operation, Plan, Query, fetch, first_count
from .table import FeatureStatements, Table

__all__ = ["JobPage", "OperatorStatements", "get", "jobs", "purge_dead", "retry", "retry_dead"]

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
class OperatorStatements(FeatureStatements):
    get: bytes
    retry: bytes
    retry_dead: bytes
    jobs: bytes
    purge_dead: bytes

    @classmethod
    def special(cls, t: Table) -> dict[str, Any]:
        every_kind = "(%(kinds)s::text[] IS NULL OR t.kind = ANY(%(kinds)s::text[]))"
        return {
            "retry": t.render(RETRY, revive=reviving(t, "t.id = ANY(%(ids)s::bigint[])")),
            "retry_dead": t.render(RETRY_DEAD, revive=reviving(t, every_kind)),
            "purge_dead": t.render(PURGE_DEAD, keep=t.history_copy("purged", "dead")),
        }


def get(s: OperatorStatements, job_id: int) -> Operation[Job | None]:
    (checked,) = validate_ids([job_id])
    return fetch(s.get, (checked,), lambda rows: Job.from_row(rows[0]) if rows else None)


def retry(
    s: OperatorStatements, channel: str, job_ids: Iterable[Job | int] | Job | int
) -> Operation[int]:
    ids = validate_ids([job_ids] if isinstance(job_ids, (int, Job)) else job_ids)

    def plan() -> Plan[int]:
        if not ids:
            return 0
        rows = yield Query(s.retry, {"ids": ids, "channel": channel})
        return len(rows)

    return Operation(plan())


class JobPage(TypedDict, total=False):
    """What `jobs` lists: the jobs of one ``status``, of ``kinds`` and of
    ``queues`` (each None, the default: any), up to ``limit`` of them (100)
    after the id ``after_id`` (None: from the first)."""

    status: JobStatus | str | None
    kinds: Iterable[str] | None
    limit: int
    after_id: int | None
    queues: Iterable[str] | None


def jobs(s: OperatorStatements, **page: Unpack[JobPage]) -> Operation[list[Job]]:
    """A page of jobs in id order; `after_id` continues after the last one seen."""
    status, after_id = page.get("status"), page.get("after_id")
    params = {
        "status": None if status is None else validate_status(status).value,
        "kinds": validate_kinds(page.get("kinds")),
        "queues": validate_queues(page.get("queues")),
        "limit": validate_limit(page.get("limit", 100)),
        "after_id": None if after_id is None else validate_job_id(after_id, "after_id"),
    }
    return fetch(s.jobs, params, lambda rows: [Job.from_row(r) for r in rows])


def retry_dead(s: OperatorStatements, channel: str, kinds: Iterable[str] | None) -> Operation[int]:
    """Every dead job (of `kinds`) back to pending: `retry` for all of them."""
    params = {"kinds": validate_kinds(kinds), "channel": channel}
    return fetch(s.retry_dead, params, first_count)


def purge_dead(
    s: OperatorStatements, older_than: timedelta, kinds: Iterable[str] | None
) -> Operation[int]:
    """Delete jobs that died more than `older_than` ago (a dead job's run_at)."""
    params = {"older_than": validate_age(older_than, "older_than"), "kinds": validate_kinds(kinds)}
    return fetch(s.purge_dead, params, first_count)
