"""What a worker tells people: its log lines and its listeners' `JobEvent`s.

Events are emitted only once what they report is written (claims once
they returned). A listener that raises is logged once with its traceback,
its later errors counted and the count logged at the end of the run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ...core.events import EventListener, EventName, JobEvent, first_line, one_line
from ...core.jobs import Job, JobStatus
from ...core.ops import Failure
from ...core.states import Event
from ...core.worker import Outcome, describe_jobs

__all__ = ["Reporter"]

log = logging.getLogger("pgqueue.worker")

# Which event a failure that left its job pending reports, by what it was decided for.
_PENDING_AGAIN = {
    Event.FAIL: EventName.FAILED,
    Event.EXPIRE: EventName.INTERRUPTED,
    Event.RELEASE: EventName.RELEASED,
}
# Which event a failure reports by the status written, whatever it was decided
# for: the database cancels a job whose cancel was requested, however it ended.
_WRITTEN = {JobStatus.DEAD: EventName.DEAD, JobStatus.CANCELLED: EventName.CANCELLED}


class Reporter:
    """Owner: the worker run; called from its event loop only.

    ``_errors`` (id of a listener -> exceptions it raised this run) is
    written by `emit` and read by `close`.
    """

    def __init__(self, worker: str, table: str, listeners: Sequence[EventListener]) -> None:
        self.worker = worker
        self.table = table
        self.listeners = list(listeners)
        self._errors: dict[int, int] = {}

    @property
    def wanted(self) -> bool:
        """Whether per-job reports have an audience (listeners, or DEBUG logging)."""
        return bool(self.listeners) or log.isEnabledFor(logging.DEBUG)

    def emit(self, event: JobEvent) -> None:
        """Call every listener with ``event``; one that raises is logged, never propagated."""
        for listener in self.listeners:
            try:
                listener(event)
            except Exception:
                errors = self._errors.get(id(listener), 0)
                self._errors[id(listener)] = errors + 1
                if not errors:
                    log.exception(
                        "worker %s: event listener %r raised on %s of job %d (%s); "
                        "its further errors are counted, not logged",
                        self.worker, listener, event.name, event.job_id, event.kind,
                    )  # fmt: skip

    def close(self) -> None:
        for listener in self.listeners:
            errors = self._errors.pop(id(listener), 0)
            if errors > 1:
                log.error("worker %s: event listener %r raised %d times in this run",
                          self.worker, listener, errors)  # fmt: skip

    def claimed(self, jobs: list[Job]) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("worker %s claimed %d jobs", self.worker, len(jobs))
            for job in jobs:
                log.debug("job %d (%s) claimed (attempt %d of %d)",
                          job.id, job.kind, job.attempts, job.max_attempts)  # fmt: skip
        if self.listeners:
            for job in jobs:
                self.emit(JobEvent(EventName.CLAIMED, job.id, job.kind, self.worker,
                                   self.table, job.attempts, queue=job.queue,
                                   priority=job.priority))  # fmt: skip

    def decided(self, job: Job, failure: Failure, event: Event, exc: BaseException | None) -> None:
        """Log a failure when it is decided, with the exception at hand (listeners
        hear of it once written: `written`)."""
        tries = f"{job.attempts} of {job.max_attempts}"
        if event is Event.RELEASE:
            log.debug("job %d (%s) released unstarted", job.id, job.kind)
        elif event is Event.EXPIRE:
            if failure.status is JobStatus.DEAD:
                message = "job %d (%s) interrupted at shutdown on its last attempt (%s): now dead"
                log.error(message, job.id, job.kind, tries)
            else:
                message = "job %d (%s) interrupted at shutdown (attempt %s): back to pending"
                log.warning(message, job.id, job.kind, tries)
        elif event is Event.CANCEL:
            log.debug("job %d (%s) stopped after its cancel was requested", job.id, job.kind)
        elif failure.status is JobStatus.DEAD:
            message = "job %d (%s) failed on its last attempt (%s), now dead: %s"
            log.error(message, job.id, job.kind, tries, first_line(failure.error), exc_info=exc)
        else:
            message = "job %d (%s) failed (attempt %s), retrying in %.1fs: %s"
            delay = failure.delay.total_seconds()
            log.warning(message, job.id, job.kind, tries, delay, first_line(failure.error))

    def written(
        self, batch: list[tuple[Job, Outcome]], done: list[int], written: dict[int, JobStatus]
    ) -> None:
        """What a statement wrote: warn of outcomes it refused; log (DEBUG) and
        tell the listeners the rest."""
        if len(done) + len(written) < len(batch):
            recorded = {*done, *written}
            log.warning(
                "worker %s: %d outcomes not recorded, those jobs' leases had expired: %s",
                self.worker,
                len(batch) - len(recorded),
                describe_jobs(job for job, _ in batch if job.id not in recorded),
            )
        cancelled = released = None
        if written:
            cancelled = [j for j, _ in batch if written.get(j.id) is JobStatus.CANCELLED]
            pending = JobStatus.PENDING
            released = [j for j, o in batch
                        if o.cause is Event.RELEASE and written.get(j.id) is pending]  # fmt: skip
        if released:
            log.info("worker %s released %d unstarted jobs: %s", self.worker, len(released),
                     describe_jobs(released))  # fmt: skip
        if cancelled:
            log.info("worker %s recorded %d cancelled jobs (deleted, never retried): %s",
                     self.worker, len(cancelled), describe_jobs(cancelled))  # fmt: skip
        if not self.wanted:
            return
        deleted = set(done)
        debug = log.isEnabledFor(logging.DEBUG)
        for job, outcome in batch:
            failure = outcome.failure
            if failure is None:
                if job.id not in deleted:
                    continue
                name, attempts, error = EventName.SUCCEEDED, job.attempts, None
            else:
                status = written.get(job.id)
                if status is None:
                    continue
                name = _WRITTEN.get(status) or _PENDING_AGAIN.get(outcome.cause, EventName.FAILED)
                attempts, error = failure.new_attempts, first_line(failure.error)
            if debug:
                log.debug("job %d (%s) recorded as %s", job.id, job.kind, name)
            if self.listeners:
                self.emit(JobEvent(name, job.id, job.kind, self.worker, self.table,
                                   attempts=attempts, duration=outcome.duration,
                                   error=error, queue=job.queue,
                                   priority=job.priority))  # fmt: skip

    def reaped(self, written: dict[int, JobStatus]) -> None:
        reaped = [i for i, status in written.items() if status is JobStatus.PENDING]
        buried = [i for i, status in written.items() if status is JobStatus.DEAD]
        cancelled = [i for i, status in written.items() if status is JobStatus.CANCELLED]
        if cancelled:
            log.info("worker %s reaped %d cancelled jobs whose lease had expired (deleted, "
                     "never retried): %s", self.worker, len(cancelled),
                     ", ".join(map(str, cancelled)))  # fmt: skip
        if reaped:
            log.warning("worker %s reaped %d jobs whose lease had expired, back to pending: %s",
                        self.worker, len(reaped), ", ".join(map(str, reaped)))  # fmt: skip
        if buried:
            log.error("worker %s buried %d jobs whose lease expired on their last attempt: %s",
                      self.worker, len(buried), ", ".join(map(str, buried)))  # fmt: skip
        if self.listeners:
            for job_id, status in written.items():
                name = _WRITTEN.get(status, EventName.REAPED)
                self.emit(JobEvent(name, job_id, None, self.worker, self.table))

    def retrying(self, what: str, exc: BaseException, delay: float) -> None:
        log.warning("worker %s: %s failed (%s); retrying in %.1fs", self.worker, what,
                    one_line(exc), delay)  # fmt: skip
