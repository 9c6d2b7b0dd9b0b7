"""`Queue.wait`: the blocking wait (`pgqueue.connection.waiting`) on the queue's settings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..connection.waiting import wait_blocking
from ..core.jobs import Job

if TYPE_CHECKING:
    from .queue import Queue

__all__ = ["wait_blocking", "wait_for_result"]


def wait_for_result(queue: Queue, job_id: Job | int, timeout: float) -> Any:
    """`Queue.wait`."""
    conninfo, kwargs = queue.connection_settings()
    return wait_blocking(queue.core, conninfo, kwargs, job_id, timeout)
