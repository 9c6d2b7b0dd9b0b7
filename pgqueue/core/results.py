"""Results: what a job enqueued with ``result_ttl`` leaves behind, and how a wait reads it.

No I/O here. A handler's return value is encoded by `encode_result` (the
worker fails the job with a clear ``last_error`` when it cannot be), kept by
the statement that deletes the job, and read back as a `JobResult`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from .backoff import Backoff

__all__ = [
    "JobFailed",
    "JobNotCommitted",
    "JobResult",
    "NoResult",
    "ResultNotJSON",
    "WAIT_POLL",
    "encode_result",
]

# The outcomes of a job that is over (`JobResult.outcome`; else pending or running).
FINISHED: Final = frozenset({"succeeded", "dead", "cancelled"})

# How often `wait` looks again without a notification (the safety net):
# 50 ms doubling to 2 s, stretched by up to a fifth.
WAIT_POLL: Final = Backoff(
    base=timedelta(milliseconds=50), factor=2.0, cap=timedelta(seconds=2), jitter=0.2
)

# How long the probe for an uncommitted enqueue waits on the enqueuer's lock.
PROBE_LOCK_TIMEOUT: Final = "200ms"

_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


class ResultNotJSON(TypeError):
    """A handler returned a value that cannot be kept as JSON; its job fails."""


def encode_result(value: Any, kind: str = "") -> str:
    """A handler's return value as JSON text, or `ResultNotJSON` saying why not.

    >>> encode_result({"total": 3})
    '{"total":3}'
    """
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        of = f" of {kind!r}" if kind else ""
        raise ResultNotJSON(
            f"the handler{of} returned a value that cannot be kept as JSON (result_ttl): {exc}"
        ) from exc
    if "\\u0000" in text:
        raise ResultNotJSON("a result must not contain NUL characters (jsonb cannot store them)")
    return text


@dataclass(frozen=True, slots=True)
class JobResult:
    """Where a job stands, as `result()` reads it.

    ``outcome`` is ``"succeeded"``, ``"dead"`` or ``"cancelled"`` once the
    job is over (kept for its ``result_ttl``), else ``"pending"`` or
    ``"running"``. ``value`` is the handler's return value (succeeded);
    ``error`` the last error (dead).
    """

    job_id: int
    outcome: str
    value: Any = None
    error: str | None = None
    finished_at: datetime | None = None

    @property
    def finished(self) -> bool:
        return self.outcome in FINISHED

    @classmethod
    def from_row(cls, job_id: int, row: tuple[Any, ...]) -> JobResult:
        outcome, value, error, finished_at = row
        return cls(job_id, outcome, value, error, finished_at)


class JobFailed(Exception):
    """`wait` found the job dead or cancelled; ``.result`` says which and why."""

    def __init__(self, result: JobResult) -> None:
        why = f": {result.error.splitlines()[0]}" if result.error else ""
        super().__init__(f"job {result.job_id} is {result.outcome}{why}")
        self.result = result


class NoResult(LookupError):
    """`wait` on a job that is not in the queue and left no result: it never
    existed, finished without ``result_ttl``, or its result expired."""

    def __init__(self, job_id: int) -> None:
        super().__init__(
            f"job {job_id} is not in the queue and has no result kept: it does not exist, "
            "finished without result_ttl, or its result expired"
        )
        self.job_id = job_id


class JobNotCommitted(NoResult):
    """`wait` on a job whose enqueuing transaction has not committed yet:
    no other connection can see it, so the wait would never end."""

    def __init__(self, job_id: int) -> None:
        LookupError.__init__(
            self,
            f"job {job_id} was enqueued by a transaction that has not committed yet: "
            "commit it before waiting for the job (no other connection sees it until then)",
        )
        self.job_id = job_id


def finished_or_raise(result: JobResult) -> Any:
    """The value of a finished job, or `JobFailed`."""
    if result.outcome == "succeeded":
        return result.value
    raise JobFailed(result)
