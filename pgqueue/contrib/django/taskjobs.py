"""How a Django task call is kept in a pgqueue job, and read back. No I/O, no Django.

A call is the job's payload: the task's dotted path, its arguments and the
alias of the backend that enqueued it. A run that succeeds returns a
`RunRecord` (the call again, with when and where it ran and the task's
return value), which the job's result keeps (``result_ttl``) after the job
row is gone. A task's exception reaches ``last_error`` as a `TaskRaised`,
whose first line names the exception's class by its dotted path.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

__all__ = [
    "OUTCOME_STATUS",
    "RunRecord",
    "TaskCall",
    "TaskRaised",
    "WorkerFailure",
    "class_path",
    "error_class_path",
    "worker_ids",
]

# pgqueue's outcome of a job -> the name of Django's TaskResultStatus member.
# A failed attempt that will be retried is pending again: READY, with the error.
OUTCOME_STATUS: Final = {
    "pending": "READY",
    "running": "RUNNING",
    "succeeded": "SUCCESSFUL",
    "dead": "FAILED",
    "cancelled": "FAILED",
}

UNKNOWN_WORKER: Final = "unknown"


def class_path(cls: type) -> str:
    """``module.QualName`` of a class, as Django's task errors name them."""
    return f"{cls.__module__}.{cls.__qualname__}"


class TaskRaised(Exception):
    """A Django task raised ``exc``; ``last_error`` keeps its dotted class path and message.

    The worker raises it in place of the task's exception, with that
    exception's traceback, so that ``last_error`` reads
    ``TaskRaised: shop.errors.OutOfStock: no teapots`` and the frames of the
    task's code.
    """

    def __init__(self, exc: BaseException) -> None:
        self.exception_class_path = class_path(type(exc))
        text = str(exc)
        super().__init__(
            f"{self.exception_class_path}: {text}" if text else self.exception_class_path
        )


class WorkerFailure(Exception):
    """The class a task error names when the failure came from outside the
    task's code (a timeout, a lost worker, a payload that could not run):
    pgqueue's ``last_error`` says which."""


def error_class_path(last_error: str) -> str:
    """The dotted path of the exception class a ``last_error`` stands for.

    >>> error_class_path("TaskRaised: shop.errors.OutOfStock: no teapots")
    'shop.errors.OutOfStock'
    >>> error_class_path("TimeoutError: the job ran past job_timeout")
    'builtins.TimeoutError'
    """
    head = last_error.split("\n", 1)[0]
    name, _, rest = head.partition(": ")
    if name == TaskRaised.__name__ and rest:
        return rest.split(": ", 1)[0]
    found = getattr(builtins, name, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        return f"builtins.{name}"
    return class_path(WorkerFailure)


@dataclass(frozen=True)
class TaskCall:
    """One call of a Django task, as a job's payload keeps it."""

    path: str
    args: list[Any]
    kwargs: dict[str, Any]
    backend: str
    run_after: datetime | None = None

    def payload(self) -> dict[str, Any]:
        """The job's payload (JSON: pgqueue refuses what it cannot encode)."""
        out: dict[str, Any] = {
            "task": self.path,
            "args": self.args,
            "kwargs": self.kwargs,
            "backend": self.backend,
        }
        if self.run_after is not None:
            out["run_after"] = self.run_after.isoformat()
        return out

    @classmethod
    def from_payload(cls, payload: object) -> TaskCall:
        """Read a payload back; `ValueError` if it is not one `payload` wrote."""
        if not isinstance(payload, Mapping):
            raise ValueError(f"a Django task's payload is an object, not {payload!r:.80}")
        path, args, kwargs = payload.get("task"), payload.get("args"), payload.get("kwargs")
        backend, run_after = payload.get("backend"), payload.get("run_after")
        if not isinstance(path, str) or not path:
            raise ValueError("a Django task's payload names no task ('task')")
        if not isinstance(args, list) or not isinstance(kwargs, Mapping):
            raise ValueError(f"the payload of {path} lacks 'args' (a list) or 'kwargs' (an object)")
        if not isinstance(backend, str) or not backend:
            raise ValueError(f"the payload of {path} names no backend ('backend')")
        if run_after is not None and not isinstance(run_after, str):
            raise ValueError(f"the payload of {path} has a run_after that is not a date")
        return cls(
            path,
            list(args),
            dict(kwargs),
            backend,
            datetime.fromisoformat(run_after) if run_after else None,
        )


@dataclass(frozen=True)
class RunRecord:
    """What a successful run returns for the job's result: enough to rebuild
    Django's ``TaskResult`` once the job row is gone."""

    call: TaskCall
    queue: str
    priority: int
    enqueued_at: datetime
    started_at: datetime
    worker_ids: list[str]
    value: Any

    def to_json(self) -> dict[str, Any]:
        return {
            **self.call.payload(),
            "queue": self.queue,
            "priority": self.priority,
            "enqueued_at": self.enqueued_at.isoformat(),
            "started_at": self.started_at.isoformat(),
            "worker_ids": self.worker_ids,
            "value": self.value,
        }

    @classmethod
    def from_json(cls, data: object) -> RunRecord:
        """Read a kept result back; `ValueError` if it is not one `to_json` wrote."""
        call = TaskCall.from_payload(data)
        if not isinstance(data, Mapping):  # from_payload refused it already; for mypy
            raise ValueError("a Django task's run is an object")
        try:
            queue, priority = data["queue"], data["priority"]
            enqueued_at = datetime.fromisoformat(data["enqueued_at"])
            started_at = datetime.fromisoformat(data["started_at"])
            worker_ids = [str(w) for w in data["worker_ids"]]
            value = data["value"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"the result of {call.path} is not a Django task's run") from exc
        if not isinstance(queue, str) or type(priority) is not int:
            raise ValueError(f"the result of {call.path} is not a Django task's run")
        return cls(call, queue, priority, enqueued_at, started_at, worker_ids, value)


def worker_ids(attempts: int, last_worker: str | None) -> list[str]:
    """One worker per attempt (Django counts attempts by them): pgqueue keeps
    only the name of the worker running the job now; earlier ones are unknown."""
    if attempts <= 0:
        return []
    if last_worker is None:
        return [UNKNOWN_WORKER] * attempts
    return [UNKNOWN_WORKER] * (attempts - 1) + [last_worker]
