"""How the dashboard lists jobs: each job of a page with the start of its
payload's JSON text and its stored size, never the whole value (see
`pgqueue.core.dashboard`)."""

from __future__ import annotations

from typing import Any, Final

from psycopg import sql

from .dashboard_pages import JobPage, Preview
from .jobs import Job
from .plans import Plan, Query
from .schema.columns import JOB_COLUMNS

__all__ = [
    "DETAIL_CHARS",
    "ERROR_CHARS",
    "LISTED_BYTES",
    "PREVIEW_CHARS",
    "listed",
    "listed_row",
    "listing",
    "page",
]

# A list shows the start of a payload stored in at most this many bytes ...
LISTED_BYTES: Final = 16_384
# ... this many characters of its JSON text, and of an error this many.
PREVIEW_CHARS: Final = 200
ERROR_CHARS: Final = 2000
# A job's page shows this many characters of its payload, result and error.
DETAIL_CHARS: Final = 65_536


def listed(error_chars: int) -> sql.Composable:
    """`JOB_COLUMNS` of a listing's subquery ``s`` (see `listing`): no payload
    (the listing reads the start of its text instead), the error cut short."""
    return sql.SQL(", ").join(
        sql.SQL("NULL::jsonb")
        if c == "payload"
        else sql.SQL("left(s.last_error, {})").format(sql.Literal(error_chars))
        if c == "last_error"
        else sql.Identifier("s", c)
        for c in JOB_COLUMNS
    )


def listing(inner: sql.Composable, order: sql.Composable) -> bytes:
    """A page of jobs from ``inner`` (which reads ``{cols}``, ``payload_text``
    and ``payload_size`` up to its LIMIT): each job with the start of its
    payload and its size, and ``now()``. The LIMIT keeps the subquery apart,
    so each payload's text is made once, for the rows of the page only, and
    never leaves the server whole."""
    return (
        sql.SQL(
            "SELECT {listed}, left(s.payload_text, {preview}), s.payload_size,"
            " coalesce(length(s.payload_text) <= {preview}, false), now()"
            " FROM ({inner}) AS s ORDER BY {order}"
        )
        .format(
            listed=listed(ERROR_CHARS),
            preview=sql.Literal(PREVIEW_CHARS),
            inner=inner,
            order=order,
        )
        .as_bytes(None)
    )


def listed_row(row: tuple[Any, ...]) -> tuple[Job, Preview]:
    n = len(JOB_COLUMNS)
    return Job.from_row(row[:n]), Preview(row[n], row[n + 1], row[n + 2])


def page(statement: bytes, params: dict[str, Any], limit: int) -> Plan[JobPage]:
    rows = yield Query(statement, params)
    now = rows[0][-1] if rows else None
    if now is None:
        ((now,),) = yield Query(b"SELECT now()")
    jobs, previews = [], {}
    for row in rows[:limit]:
        job, preview = listed_row(row)
        jobs.append(job)
        previews[job.id] = preview
    more = len(rows) > limit
    return JobPage(jobs, jobs[-1].id if more else None, now, previews)
