"""pgqueue: a durable job queue inside the PostgreSQL database you already run.

A job and the data it describes commit in one transaction.
"""

from __future__ import annotations

from .aio.queue import AsyncQueue
from .aio.tasks import AsyncTask
from .aio.worker import AsyncWorker
from .core.backoff import Backoff
from .core.context import JobCancelled, JobContext, job_context
from .core.events import ActionName, EventName, JobEvent, OperatorAction
from .core.jobs import DuplicateJob, Job, JobNotRunning, JobSpec, JobStatus, Stats
from .core.migrations import IncompatibleTable, SchemaError, SchemaTooNew
from .core.ops import Cancelled, Group, LimitState, QueueState
from .core.results import JobFailed, JobNotCommitted, JobResult, NoResult
from .core.schedules import ScheduleState, UnknownSchedule
from .core.states import IllegalTransition
from .sync.queue import Queue
from .sync.tasks import Task
from .sync.worker import Worker

__all__ = [
    "ActionName",
    "AsyncQueue",
    "AsyncTask",
    "AsyncWorker",
    "Backoff",
    "Cancelled",
    "DuplicateJob",
    "EventName",
    "Group",
    "IllegalTransition",
    "IncompatibleTable",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobEvent",
    "JobFailed",
    "JobNotCommitted",
    "JobNotRunning",
    "JobResult",
    "JobSpec",
    "JobStatus",
    "LimitState",
    "NoResult",
    "OperatorAction",
    "Queue",
    "QueueState",
    "ScheduleState",
    "SchemaError",
    "SchemaTooNew",
    "Stats",
    "Task",
    "UnknownSchedule",
    "Worker",
    "job_context",
]

__version__ = "0.1.0"
