"""pgqueue: a durable job queue inside the PostgreSQL database you already run.

A job and the data it describes commit in one transaction.
"""

from __future__ import annotations

from .aio.queue import AsyncQueue
from .core.backoff import Backoff
from .core.jobs import Job, JobNotRunning, JobSpec, JobStatus, Stats
from .core.states import IllegalTransition
from .sync.queue import Queue

__all__ = [
    "AsyncQueue",
    "Backoff",
    "IllegalTransition",
    "Job",
    "JobNotRunning",
    "JobSpec",
    "JobStatus",
    "Queue",
    "Stats",
]

__version__ = "0.1.0"
