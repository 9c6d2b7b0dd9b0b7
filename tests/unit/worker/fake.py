"""An in-memory queue with the calls a worker makes (`pgqueue.aio.worker.calls.WorkerQueue`).

For testing the worker's components below the database: it keeps jobs in
dicts, fences outcomes as the real statements do (by worker and claim),
and can be told to fail or to block a call. The real-PostgreSQL suites
stay the judge of behaviour; this one lets a test put the worker in a
phase that a real server makes hard to reach (a claim in flight at stop,
a database gone at shutdown, LISTEN refused, a lease lost).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import psycopg
import psycopg.errors

from pgqueue import Job, JobStatus
from pgqueue.aio.worker.calls import Channels
from pgqueue.core.heads import NO_HEADS, ClaimHeads
from pgqueue.core.jobs import LEASE_EXPIRED
from pgqueue.core.ops import Failure, Heartbeat, QueueCore, Turn, WorkerClaim
from pgqueue.core.schedules import Schedule, Tick
from pgqueue.core.tasks import TaskRegistry


class FakeQueue:
    table = "fake_jobs"

    def __init__(self) -> None:
        core = QueueCore(self.table)
        self.transaction_pooling = False
        self.channels = Channels(core.sql.control_channel, core.sql.listen, core.sql.listen_control)
        self.decide = core.failure  # the decisions are the real ones
        self.tasks = TaskRegistry()  # none: the tests give handlers
        self.jobs: dict[int, Job] = {}  # pending, running and dead; succeeded ones are deleted
        self.succeeded: list[int] = []
        self.results: dict[int, str] = {}  # the return values written with successes
        self.cancel_requested: set[int] = set()  # running jobs asked to stop (`cancel`)
        self.cancelled: list[int] = []  # jobs deleted as cancelled
        self.calls: Counter[str] = Counter()
        self.failing: Counter[str] = Counter()  # call name -> how many more calls raise
        self.down = False  # every call raises, as with the server unreachable
        self.gates: dict[str, anyio.Event] = {}  # call name -> held until set
        self.entered: dict[str, anyio.Event] = {}  # call name -> set when one starts
        self.refuse_listen = True
        self.claim_limit: int | None = None  # claims of more jobs are cancelled (statement_timeout)
        self.last_ticks: dict[str, datetime] = {}  # schedule name -> its last tick (the row)
        self.limits: dict[str, int] = {}  # limit key -> jobs of it that may run at once
        self._next_id = 1

    # -- arranging ----------------------------------------------------------------

    def add(
        self,
        kind: str = "k",
        n: int = 1,
        *,
        orphaned: bool = False,
        result_ttl: timedelta | None = None,
        limit_key: str | None = None,
    ) -> list[int]:
        now = datetime.now(UTC)
        ids = []
        for _ in range(n):
            error = f"{LEASE_EXPIRED}: no word" if orphaned else None
            job = Job(self._next_id, kind, {}, 0, 3, JobStatus.PENDING, now, error, None, None,
                      now, result_ttl=result_ttl, limit_key=limit_key)  # fmt: skip
            self.jobs[job.id] = job
            ids.append(job.id)
            self._next_id += 1
        return ids

    def cancel(self, *job_ids: int) -> None:
        """As `AsyncQueue.cancel` (with no notification: the heartbeat tells the
        worker): a waiting job goes at once, a running one is marked."""
        for job_id in job_ids:
            job = self.jobs.get(job_id)
            if job is None:
                continue
            if job.status is JobStatus.RUNNING:
                self.cancel_requested.add(job_id)
            else:
                del self.jobs[job_id]
                self.cancelled.append(job_id)

    def status(self, job_id: int) -> JobStatus | None:
        job = self.jobs.get(job_id)
        return job.status if job is not None else None

    def hold(self, call: str) -> anyio.Event:
        """Make the next calls of ``call`` wait until the returned event is set."""
        self.gates[call] = gate = anyio.Event()
        return gate

    def started(self, call: str) -> anyio.Event:
        self.entered[call] = event = anyio.Event()
        return event

    async def _enter(self, call: str) -> None:
        self.calls[call] += 1
        if call in self.entered:
            self.entered[call].set()
        if call in self.gates:
            await self.gates[call].wait()
        if self.down:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        if self.failing[call]:
            self.failing[call] -= 1
            raise psycopg.OperationalError(f"{call} failed (the fake says so)")

    # -- the calls ----------------------------------------------------------------

    async def open(self, *, wait: bool = True) -> None:
        """(`AsyncWorker.run`.) Nothing to open."""

    async def turn(
        self,
        succeeded: Sequence[int],
        failures: Sequence[Failure],
        claim: WorkerClaim,
        limit: int,
        *,
        results: Mapping[int, str] | None = None,
        plain: bool = False,
        heads: ClaimHeads = NO_HEADS,
    ) -> Turn:
        await self._enter("turn")
        worker, kinds, queues = claim.worker, claim.kinds, claim.queues
        if self.claim_limit is not None and limit > self.claim_limit:
            raise psycopg.errors.QueryCanceled("canceling statement due to statement timeout")
        # As the real statement: its claim sees the limits' slots as they were
        # before its outcomes freed any, and the slot of each success goes to
        # the next ready job of its key that the worker may claim.
        free = self._free_slots()
        held = [self.jobs[i] for i in succeeded if self._held_by(i, worker)]
        freed = Counter(j.limit_key for j in held if j.limit_key is not None)
        handing = freed if limit > 0 else Counter()  # a settle (limit 0) hands nothing on
        failing = [self.jobs[f.job_id] for f in failures if f.job_id in self.jobs]
        freed_by_failures = sum(1 for j in failing if j.limit_key is not None)
        done, written = self._settle(succeeded, failures, worker, results)
        claimed = self._claim(worker, limit, kinds, queues, orphans=False, free=free + handing)
        taken = Counter(j.limit_key for j in claimed if j.limit_key is not None)
        handed = sum(min(n, max(0, taken[key] - free[key])) for key, n in handing.items())
        left_free = sum(freed.values()) - handed + freed_by_failures
        return Turn(done, written, claimed, slots_left_free=left_free)

    async def settle(
        self,
        succeeded: Sequence[int],
        failures: Sequence[Failure],
        *,
        worker: str,
        results: Mapping[int, str] | None = None,
    ) -> tuple[list[int], dict[int, JobStatus]]:
        await self._enter("settle")
        return self._settle(succeeded, failures, worker, results)

    async def claim_orphan(
        self,
        *,
        worker: str,
        kinds: Sequence[str] | None = None,
        queues: Sequence[str] | None = None,
    ) -> list[Job]:
        await self._enter("claim_orphan")
        return self._claim(worker, 1, kinds, queues, orphans=True)

    async def heartbeat(self, job_ids: Sequence[int], *, worker: str) -> Heartbeat:
        await self._enter("heartbeat")
        held = [i for i in job_ids if self._held_by(i, worker)]
        return Heartbeat(held, [i for i in held if i in self.cancel_requested])

    async def cancel_requests(self, job_ids: Sequence[int]) -> list[int]:
        await self._enter("cancel_requests")
        return [i for i in job_ids if i in self.cancel_requested]

    async def reap_outcomes(self, visibility_timeout: timedelta) -> dict[int, JobStatus]:
        await self._enter("reap")
        return {}

    async def connection_settings(self) -> tuple[str, dict[str, Any]]:
        await self._enter("listen")
        if self.refuse_listen:
            raise psycopg.OperationalError("too many connections for role")
        raise AssertionError("the fake has no server to LISTEN on")

    async def schema_version(self) -> int | None:
        await self._enter("schema_version")
        return 1

    async def register_schedules(self, schedules: Sequence[Schedule]) -> None:
        await self._enter("register_schedules")
        for s in schedules:
            self.last_ticks.setdefault(s.name, datetime.now(UTC))

    async def schedule_clock(
        self, names: Sequence[str]
    ) -> tuple[datetime, dict[str, datetime | None]]:
        await self._enter("schedule_clock")
        found = {n: self.last_ticks[n] for n in names if n in self.last_ticks}
        return datetime.now(UTC), found  # type: ignore[return-value]

    async def tick_schedule(self, schedule: Schedule, tick: datetime) -> Tick:
        await self._enter("tick_schedule")
        now = datetime.now(UTC)
        if not self.last_ticks[schedule.name] < tick:
            return Tick(False, None, False, now)
        self.last_ticks[schedule.name] = tick
        [job_id] = self.add(schedule.kind)
        return Tick(True, job_id, False, now)

    # -- what the statements do -----------------------------------------------------

    def _held_by(self, job_id: int, worker: str) -> bool:
        job = self.jobs.get(job_id)
        return job is not None and job.status is JobStatus.RUNNING and job.locked_by == worker

    def _claim(
        self,
        worker: str,
        limit: int,
        kinds: Sequence[str] | None,
        queues: Sequence[str] | None,
        *,
        orphans: bool,
        free: Counter[str] | None = None,
    ) -> list[Job]:
        now = datetime.now(UTC)
        free = self._free_slots() if free is None else free
        ready = []
        for j in sorted(self.jobs.values(), key=lambda j: (-j.priority, j.run_at, j.id)):
            if (
                j.status is JobStatus.PENDING
                and (kinds is None or j.kind in kinds)
                and (queues is None or j.queue in queues)
                and j.orphaned == orphans
                and j.run_at <= now
                and (j.limit_key is None or free[j.limit_key] > 0)
            ):
                if j.limit_key is not None:
                    free[j.limit_key] -= 1
                ready.append(j)
        claimed = []
        for j in ready[:limit]:
            self.jobs[j.id] = new = dataclasses.replace(
                j,
                attempts=j.attempts + 1,
                status=JobStatus.RUNNING,
                locked_by=worker,
                locked_at=now,
            )
            claimed.append(new)
        return claimed

    def _free_slots(self) -> Counter[str]:
        """Limit key -> its slots no running job holds (one for a key with no limit set)."""
        free = Counter({key: self.limits.get(key, 1) for key in self._limit_keys()})
        for j in self.jobs.values():
            if j.limit_key is not None and j.status is JobStatus.RUNNING:
                free[j.limit_key] -= 1
        return free

    def _limit_keys(self) -> set[str]:
        return {j.limit_key for j in self.jobs.values() if j.limit_key is not None}

    def _settle(
        self,
        succeeded: Sequence[int],
        failures: Sequence[Failure],
        worker: str,
        results: Mapping[int, str] | None = None,
    ) -> tuple[list[int], dict[int, JobStatus]]:
        done = [i for i in succeeded if self._held_by(i, worker)]
        for i in done:
            del self.jobs[i]
            self.cancel_requested.discard(i)
            self.succeeded.append(i)
            if results is not None and i in results:
                self.results[i] = results[i]
        written: dict[int, JobStatus] = {}
        for f in failures:
            job = self.jobs.get(f.job_id)
            if job is None or job.status is not JobStatus.RUNNING or job.attempts != f.attempts:
                continue
            if f.status is JobStatus.CANCELLED or f.job_id in self.cancel_requested:
                # As the failures statement: a cancelled job goes, whatever was decided.
                del self.jobs[f.job_id]
                self.cancel_requested.discard(f.job_id)
                self.cancelled.append(f.job_id)
                written[f.job_id] = JobStatus.CANCELLED
                continue
            error = f.error if f.error is not None else job.last_error
            self.jobs[f.job_id] = dataclasses.replace(
                job, attempts=f.new_attempts, status=f.status,
                run_at=datetime.now(UTC) + f.delay, last_error=error, locked_by=None,
                locked_at=None,
            )  # fmt: skip
            written[f.job_id] = f.status
        return done, written
