"""The blocking wait for a job's result: `Queue.wait`'s, which `AsyncQueue.wait`
runs in a thread.

A wait has a connection of its own: LISTEN on the table's results channel
first, then look, then sleep until a notification names the job or the
next poll is due (`WAIT_POLL`, the safety net), and look again. Looking
first after LISTEN means no result can slip between the two. Through a
transaction pooler there is no LISTEN: the wait polls.
"""

from __future__ import annotations

import threading
from time import monotonic
from typing import Any

import psycopg
import psycopg.errors

from ..core.jobs import Job, validate_ids
from ..core.ops import QueueCore
from ..core.pooling import wait_listens
from ..core.results import (
    PROBE_LOCK_TIMEOUT,
    WAIT_POLL,
    JobNotCommitted,
    NoResult,
    finished_or_raise,
)
from .blocking import run_on
from .settings import connection_kwargs

__all__ = ["wait_blocking"]


def wait_blocking(
    core: QueueCore,
    conninfo: str,
    kwargs: dict[str, Any],
    job_id: Job | int,
    timeout: float,
    stop: threading.Event | None = None,
) -> Any:
    """Wait for the job's outcome on a connection of its own; ``stop`` (set by
    an async caller that was cancelled) ends the wait at its next look."""
    (job_id,) = validate_ids([job_id])
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be seconds, not {type(timeout).__name__}")
    if not timeout > 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    deadline = monotonic() + timeout
    mine = str(job_id)
    with psycopg.Connection.connect(conninfo, **connection_kwargs(conninfo, kwargs)) as conn:
        if wait_listens(transaction_pooling=core.transaction_pooling):
            conn.execute(core.sql.listen_results)
        polls = 0
        seen = False  # the job was seen in the queue (or committed while probed)
        while stop is None or not stop.is_set():
            result = run_on(conn, core.result(job_id))
            if result is not None and result.finished:
                return finished_or_raise(result)
            if result is None:
                if seen:
                    raise NoResult(job_id)  # it ended without result_ttl, or it expired
                _probe(conn, core, job_id)
            seen = True
            left = deadline - monotonic()
            if left <= 0:
                outcome = result.outcome if result is not None else "not visible yet"
                raise TimeoutError(f"job {job_id} did not finish within {timeout}s ({outcome})")
            polls += 1
            for note in conn.notifies(timeout=min(left, WAIT_POLL.delay(polls).total_seconds())):
                if note.payload == mine:
                    break
        raise TimeoutError(f"the wait for job {job_id} was given up")


def _probe(conn: psycopg.Connection[Any], core: QueueCore, job_id: int) -> None:
    """Neither a row nor a result: tell an enqueue still uncommitted (its
    insert holds the id) from a job that is not there; return if the row
    committed meanwhile. Nothing is ever written."""
    try:
        with conn.transaction():
            conn.execute(core.sql.control.set_local, ("lock_timeout", PROBE_LOCK_TIMEOUT))
            conn.execute(core.sql.control.probe_uncommitted, {"id": job_id})
    except psycopg.errors.LockNotAvailable:
        raise JobNotCommitted(job_id) from None
    except (psycopg.errors.DivisionByZero, psycopg.errors.InsufficientPrivilege):
        raise NoResult(job_id) from None
