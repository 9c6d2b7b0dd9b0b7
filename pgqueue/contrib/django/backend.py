"""`PgQueueBackend`: Django's task framework on pgqueue.

    TASKS = {
        "default": {
            "BACKEND": "pgqueue.contrib.django.backend.PgQueueBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"RESULT_TTL": timedelta(days=1), "MAX_ATTEMPTS": 3},
        }
    }

``task.enqueue()`` writes a job on Django's connection (so inside
``transaction.atomic()`` it commits or rolls back with the ORM's writes),
with the task's queue name, priority and ``run_after``;
``manage.py pgqueue_worker`` runs it; ``get_result`` maps pgqueue's state
onto Django's ``TaskResultStatus``. See docs/django.md.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final, TypeVar

from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from django.utils.module_loading import import_string

from ...core.context import JobCancelled
from ...core.jobs import Job, JobStatus, validate_kind
from ...core.results import JobResult, encode_result
from . import enqueue as enqueue_job
from . import get_queue
from .stale import close_stale_connections
from .taskjobs import (
    OUTCOME_STATUS,
    RunRecord,
    TaskCall,
    TaskRaised,
    error_class_path,
    worker_ids,
)
from .tasks_api import (
    BaseTaskBackend,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)

__all__ = [
    "DEFAULT_KIND",
    "BackendOptions",
    "PgQueueBackend",
    "resolve_task",
    "run_task",
    "task_error",
    "task_handlers",
]

R = TypeVar("R")

DEFAULT_KIND: Final = "django.task"
"""The job kind of Django tasks, unless a backend's ``OPTIONS["KIND"]`` says otherwise."""
DEFAULT_RESULT_TTL: Final = timedelta(days=1)
OPTION_KEYS: Final = frozenset({"KIND", "RESULT_TTL", "MAX_ATTEMPTS", "DATABASE"})


@dataclasses.dataclass(frozen=True)
class BackendOptions:
    """A `PgQueueBackend`'s ``OPTIONS``, checked."""

    kind: str = DEFAULT_KIND
    result_ttl: timedelta | None = DEFAULT_RESULT_TTL
    max_attempts: int = 3
    database: str | None = None

    @classmethod
    def read(cls, alias: str, options: Mapping[str, Any]) -> BackendOptions:
        where = f"TASKS[{alias!r}]['OPTIONS']"
        unknown = sorted(set(options) - OPTION_KEYS)
        if unknown:
            raise ImproperlyConfigured(
                f"{where} has unknown keys {unknown}; the keys are {sorted(OPTION_KEYS)}"
            )
        kind = options.get("KIND", DEFAULT_KIND)
        try:
            validate_kind(kind)
        except (TypeError, ValueError) as exc:
            raise ImproperlyConfigured(f"{where}['KIND']: {exc}") from exc
        ttl = options.get("RESULT_TTL", DEFAULT_RESULT_TTL)
        if isinstance(ttl, (int, float)) and not isinstance(ttl, bool):
            ttl = timedelta(seconds=ttl)
        if ttl is not None and (not isinstance(ttl, timedelta) or ttl <= timedelta(0)):
            raise ImproperlyConfigured(
                f"{where}['RESULT_TTL'] must be a positive timedelta or number of seconds, "
                "or None to keep no results"
            )
        max_attempts = options.get("MAX_ATTEMPTS", 3)
        if type(max_attempts) is not int or max_attempts < 1:
            raise ImproperlyConfigured(f"{where}['MAX_ATTEMPTS'] must be an int of at least 1")
        database = options.get("DATABASE")
        if database is not None and (not isinstance(database, str) or not database):
            raise ImproperlyConfigured(f"{where}['DATABASE'] must be a database alias")
        return cls(kind, ttl, max_attempts, database)


class PgQueueBackend(BaseTaskBackend):
    """A task backend whose tasks are pgqueue jobs, run by ``manage.py pgqueue_worker``.

    Supports ``run_after`` (the job's ``run_at``), priorities (-100 to 100,
    pgqueue's own range and order), queue names (pgqueue queues), async
    task functions, and results from any process (kept for
    ``OPTIONS["RESULT_TTL"]``, a day by default).
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.settings = BackendOptions.read(alias, params.get("OPTIONS", {}))

    @property
    def kind(self) -> str:
        """The job kind this backend's tasks are enqueued as."""
        return self.settings.kind

    def enqueue(self, task: Task[Any, R], args: Any, kwargs: Any) -> TaskResult[Any, R]:
        """Write the task's job (on Django's connection) and return its ``READY`` result."""
        self.validate_task(task)
        run_after = task.run_after
        if run_after is not None and timezone.is_naive(run_after):
            run_after = timezone.make_aware(run_after)  # USE_TZ = False: local time
        call = TaskCall(task.module_path, list(args), dict(kwargs), self.alias, run_after)
        job_id = enqueue_job(
            self.kind,
            call.payload(),
            using=self.settings.database,
            run_at=run_after,
            max_attempts=self.settings.max_attempts,
            queue=task.queue_name,
            priority=task.priority,
            result_ttl=self.settings.result_ttl,
        )
        result: TaskResult[Any, R] = _task_result(
            task, call, job_id, TaskResultStatus.READY, timezone.now()
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        """Where the task's job stands, read from the job table or its kept result.

        Raises ``TaskResultDoesNotExist`` for an id that is no job of this
        backend's kind, a job that ended without a kept result (or whose
        result expired), and a job cancelled or purged before it ran (its
        arguments are gone with its row).
        """
        try:
            job_id = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        queue = get_queue()
        job = queue.get(job_id) if job_id > 0 else None
        if job is not None:
            if job.kind != self.kind:
                raise TaskResultDoesNotExist(result_id)
            kept = queue.result(job_id) if job.status is JobStatus.DEAD else None
            return self._from_job(job, kept)
        kept = queue.result(job_id) if job_id > 0 else None
        if kept is None or kept.outcome != "succeeded":
            raise TaskResultDoesNotExist(result_id)
        try:
            record = RunRecord.from_json(kept.value)
        except ValueError:
            raise TaskResultDoesNotExist(result_id) from None
        return self._from_record(job_id, record, kept)

    def _task(self, call: TaskCall, queue_name: str, priority: int) -> Task[Any, Any]:
        task = resolve_task(call.path)
        try:
            return task.using(
                queue_name=queue_name,
                priority=priority,
                run_after=call.run_after,
                backend=call.backend,
            )
        except Exception:  # the settings changed since it was enqueued: the task as declared
            return task

    def _from_job(self, job: Job, kept: JobResult | None) -> TaskResult[Any, Any]:
        try:
            call = TaskCall.from_payload(job.payload)
        except ValueError:
            raise TaskResultDoesNotExist(str(job.id)) from None
        return _task_result(
            self._task(call, job.queue, job.priority),
            call,
            job.id,
            TaskResultStatus[OUTCOME_STATUS[job.status.value]],
            job.created_at,
            started=job.locked_at if job.status is JobStatus.RUNNING else None,
            finished=kept.finished_at if kept else None,
            errors=[task_error(job.last_error)] if job.last_error else [],
            workers=worker_ids(job.attempts, job.locked_by),
        )

    def _from_record(self, job_id: int, record: RunRecord, kept: JobResult) -> TaskResult[Any, Any]:
        result = _task_result(
            self._task(record.call, record.queue, record.priority),
            record.call,
            job_id,
            TaskResultStatus.SUCCESSFUL,
            record.enqueued_at,
            started=record.started_at,
            finished=kept.finished_at,
            workers=record.worker_ids,
        )
        object.__setattr__(result, "_return_value", record.value)
        return result


def _task_result(
    task: Task[Any, Any],
    call: TaskCall,
    job_id: int,
    status: TaskResultStatus,
    enqueued_at: datetime,
    *,
    started: datetime | None = None,
    finished: datetime | None = None,
    errors: Sequence[TaskError] = (),
    workers: Sequence[str] = (),
) -> TaskResult[Any, Any]:
    """Django's result of the task ``call`` that the job ``job_id`` runs.
    pgqueue keeps one start per job: it is the first attempt's and the last's."""
    return TaskResult(
        task=task,
        id=str(job_id),
        status=status,
        enqueued_at=enqueued_at,
        started_at=started,
        last_attempted_at=started,
        finished_at=finished,
        args=call.args,
        kwargs=call.kwargs,
        backend=call.backend,
        errors=list(errors),
        worker_ids=list(workers),
    )


def task_error(last_error: str) -> TaskError:
    """Django's record of a failed attempt, from pgqueue's ``last_error``."""
    return TaskError(exception_class_path=error_class_path(last_error), traceback=last_error)


def resolve_task(path: str) -> Task[Any, Any]:
    """The Django task at a dotted path; `ValueError` if there is none."""
    try:
        found = import_string(path)
    except ImportError as exc:
        raise ValueError(f"no Django task {path!r} can be imported: {exc}") from exc
    if not isinstance(found, Task):
        raise ValueError(f"{path!r} is not a Django task (decorate it with @task)")
    return found


def run_task(job: Job) -> dict[str, Any]:
    """The pgqueue handler of Django tasks: run the task a job describes.

    Sends Django's ``task_started`` and ``task_finished`` signals, closes
    stale database connections around the call (as Django does around a
    request), and returns the `RunRecord` the job's result keeps. The
    task's exception is raised again as `TaskRaised`, with its traceback.
    """
    call = TaskCall.from_payload(job.payload)
    task = resolve_task(call.path).using(
        queue_name=job.queue, priority=job.priority, backend=call.backend
    )
    started = timezone.now()
    workers = worker_ids(job.attempts, job.locked_by)
    result = _task_result(
        task,
        call,
        job.id,
        TaskResultStatus.RUNNING,
        job.created_at,
        started=started,
        workers=workers,
    )
    sender = type(task_backends[call.backend])
    task_started.send(sender=sender, task_result=result)
    close_stale_connections()
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *call.args, **call.kwargs)
        else:
            value = task.call(*call.args, **call.kwargs)
        record = RunRecord(call, job.queue, job.priority, job.created_at, started, workers, value)
        out = record.to_json()
        encode_result(out, call.path)  # a value JSON cannot keep fails here, signalled
    except JobCancelled:
        raise
    except Exception as exc:
        _finish(result, sender, TaskResultStatus.FAILED, error=exc)
        raise TaskRaised(exc).with_traceback(exc.__traceback__) from exc
    finally:
        close_stale_connections()
    object.__setattr__(result, "_return_value", value)
    _finish(result, sender, TaskResultStatus.SUCCESSFUL)
    return out


def _finish(
    result: TaskResult[Any, Any],
    sender: type,
    status: TaskResultStatus,
    error: BaseException | None = None,
) -> None:
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "status", status)
    if error is not None:
        result.errors.append(
            TaskError(
                exception_class_path=TaskRaised(error).exception_class_path,
                traceback="".join(traceback.format_exception(error)),
            )
        )
    task_finished.send(sender, task_result=result)


def task_handlers() -> dict[str, Any]:
    """The pgqueue handlers of the configured ``PgQueueBackend`` backends, by job kind."""
    return {b.kind: run_task for b in task_backends.all() if isinstance(b, PgQueueBackend)}
