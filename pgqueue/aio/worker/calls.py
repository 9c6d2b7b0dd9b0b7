"""The database calls a worker makes: a small protocol, each call bounded and watched.

`WorkerQueue` is all the worker needs of an `AsyncQueue`, so that each
component can be tested against a fake (`tests/unit/worker/fake.py`); the
worker reaches the queue's core through it only. `QueueCalls` is the
`WorkerQueue` of an `AsyncQueue`, whose worker-only calls are private. `Calls`
makes every call with a client-side deadline (a silent connection costs
at most the worker's ``call_timeout``) and logs a call that has waited `STALL_WARNING`
seconds, and again when it ends. `Shields` keeps a call whose result must
not be lost (a claim) from a stop, for the stop's grace period.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio
import psycopg
import psycopg_pool

from ...core.heads import NO_HEADS, ClaimHeads
from ...core.health import HealthStamps, Stamps
from ...core.jobs import Job, JobStatus
from ...core.ops import Failure, Heartbeat, Turn, WorkerClaim
from ...core.schedules import Schedule, Tick
from ...core.states import Event
from ...core.worker import STALL_WARNING

if TYPE_CHECKING:
    from ..queue import AsyncQueue

__all__ = ["DATABASE_ERRORS", "Calls", "Channels", "QueueCalls", "Shields", "WorkerQueue"]

log = logging.getLogger("pgqueue.worker")

T = TypeVar("T")

# What a lost, refused or silent database looks like; the worker waits and retries.
DATABASE_ERRORS = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    psycopg_pool.PoolTimeout,
    TimeoutError,  # a call past its deadline (`Calls`)
    # What psycopg raises when a connection answers out of turn: behind a
    # transaction pooler, a server session terminated in the middle of a
    # transaction (a restart, pg_terminate_backend) leaves its error for the
    # client's next command, which then gets two results.
    psycopg.InternalError,
)


@dataclass(frozen=True, slots=True)
class Channels:
    """What the worker's LISTEN connection runs and hears."""

    control: str  # the control channel (cancel requests); the others wake claims
    listen: bytes  # LISTEN on the table's channel (new jobs, freed slots)
    listen_control: bytes  # LISTEN on the control channel


class WorkerQueue(Protocol):
    """The queue calls a worker makes (`QueueCalls` makes them on an `AsyncQueue`)."""

    @property
    def table(self) -> str: ...

    @property
    def transaction_pooling(self) -> bool: ...

    @property
    def channels(self) -> Channels: ...

    def decide(
        self, job: Job, error: object, *, retry_in: timedelta | None = None, event: Event
    ) -> Failure:
        """What a failed, expired or released job becomes (no I/O)."""
        ...

    async def turn(  # a worker's turn: see `AsyncQueue._turn`
        self, succeeded: Sequence[int], failures: Sequence[Failure], claim: WorkerClaim,
        limit: int, *, results: Mapping[int, str] | None = None, plain: bool = False,
        heads: ClaimHeads = NO_HEADS,
    ) -> Turn: ...  # fmt: skip

    async def settle(
        self, succeeded: Sequence[int], failures: Sequence[Failure], *, worker: str,
        results: Mapping[int, str] | None = None,
    ) -> tuple[list[int], dict[int, JobStatus]]: ...  # fmt: skip

    async def claim_orphan(
        self, *, worker: str, kinds: Sequence[str] | None = None,
        queues: Sequence[str] | None = None,
    ) -> list[Job]: ...  # fmt: skip

    async def heartbeat(self, job_ids: Sequence[int], *, worker: str) -> Heartbeat: ...

    async def cancel_requests(self, job_ids: Sequence[int]) -> list[int]: ...

    async def reap_outcomes(self, visibility_timeout: timedelta) -> dict[int, JobStatus]: ...

    async def connection_settings(self) -> tuple[str, dict[str, Any]]:
        """The conninfo and keyword arguments the queue's pool connects with."""
        ...

    async def schema_version(self) -> int | None:
        """A cheap read: the health check of a worker whose calls have been quiet."""
        ...

    # The scheduler's (only for a worker with schedules).
    async def register_schedules(self, schedules: Sequence[Schedule]) -> None: ...

    async def schedule_clock(
        self, names: Sequence[str]
    ) -> tuple[datetime, dict[str, datetime | None]]: ...

    async def tick_schedule(self, schedule: Schedule, tick: datetime) -> Tick: ...


class QueueCalls:
    """The `WorkerQueue` of an `AsyncQueue`: its worker-only calls (private
    on the queue) and what the worker must know of the queue's core."""

    def __init__(self, queue: AsyncQueue) -> None:
        core = queue.core
        self.table = queue.table
        self.transaction_pooling = core.transaction_pooling
        self.channels = Channels(core.sql.control_channel, core.sql.listen, core.sql.listen_control)
        self.decide = core.failure
        self.turn = queue._turn
        self.settle = queue._settle
        self.claim_orphan = queue._claim_orphan
        self.heartbeat = queue._heartbeat
        self.cancel_requests = queue._cancel_requests
        self.reap_outcomes = queue._reap_outcomes
        self.connection_settings = queue.connection_settings
        self.schema_version = queue.schema_version
        self.register_schedules = queue.register_schedules
        self.schedule_clock = queue.schedule_clock
        self.tick_schedule = queue.tick_schedule


@dataclass(eq=False, slots=True)
class _Call:
    what: str
    since: float
    stalled: bool = False  # logged as waiting: its end is logged too


class Calls:
    """Makes the worker's database calls, each bounded by ``deadline`` seconds.

    Owner: the worker run. ``_in_flight`` is written by `__call__` (any
    component's task) and read by `watch_stalls`.
    """

    def __init__(
        self,
        worker: str,
        table: str,
        *,
        deadline: float = 60.0,
        health: HealthStamps | None = None,
    ) -> None:
        self.worker = worker
        self.table = table
        self.deadline = deadline
        # Its ``reached_at`` is written here, at each call that returns.
        self.health = health if health is not None else Stamps()
        self._in_flight: set[_Call] = set()

    async def __call__(
        self, what: str, fn: Callable[..., Awaitable[T]], *args: Any, **kw: Any
    ) -> T:
        """``await fn(*args, **kw)``, watched; `TimeoutError` past the deadline."""
        with self._watched(what), anyio.fail_after(self.deadline):
            result = await fn(*args, **kw)
        self.health.reached_at = time.monotonic()
        return result

    @contextmanager
    def _watched(self, what: str) -> Iterator[None]:
        call = _Call(what, anyio.current_time())
        self._in_flight.add(call)
        ended = "failed"
        try:
            yield
            ended = "returned"
        finally:
            self._in_flight.discard(call)
            if call.stalled:
                log.warning("worker %s: %s %s after %.1fs", self.worker, what, ended,
                            anyio.current_time() - call.since)  # fmt: skip

    async def watch_stalls(self) -> None:
        """Log each call that has waited `STALL_WARNING` seconds, once.

        A statement blocked on a lock, or a task waiting for a connection of
        an exhausted pool, raises nothing: without this line the worker
        would just fall silent.
        """
        while True:
            await anyio.sleep(STALL_WARNING / 5)
            now = anyio.current_time()
            for call in list(self._in_flight):
                if not call.stalled and now - call.since >= STALL_WARNING:
                    call.stalled = True
                    log.warning("worker %s: %s waiting on the database for %.0fs so far: %s",
                                self.worker, call.what, now - call.since,
                                self._why_stalled(call))  # fmt: skip

    def _why_stalled(self, call: _Call) -> str:
        """Whether the database answered other calls meanwhile: if so, this
        one waits on a lock or a slow statement; if not, it is most likely
        waiting for a connection the server refuses or never answers."""
        waited = anyio.current_time() - call.since
        if time.monotonic() - self.health.reached_at >= waited:
            return (
                "no database call of this worker has returned meanwhile, so most likely the "
                "server cannot be reached or refuses connections (the psycopg.pool warnings "
                "in this log give its reason), or every connection of the pool is taken"
            )
        return (
            f"other calls returned meanwhile, so a lock held on {self.table} or a slow "
            "statement (pg_stat_activity and pg_locks show which)"
        )


class Shields:
    """Shields calls from a stop until ``cut_after`` says how long it waits.

    Owner: the fetcher, for its claims (`shielded`); ``cut_after`` comes
    from the crew's stop. Both on the event loop.
    """

    def __init__(self) -> None:
        self._scopes: set[anyio.CancelScope] = set()  # the calls shielded now
        self._cut_at: float | None = None  # when a stop gives up on them

    @contextmanager
    def shielded(self) -> Iterator[None]:
        with anyio.CancelScope(shield=True) as scope:
            if self._cut_at is not None:
                scope.deadline = self._cut_at
            self._scopes.add(scope)
            try:
                yield
            finally:
                self._scopes.discard(scope)

    def cut_after(self, seconds: float) -> None:
        """(Stop.) Calls still waiting on the database ``seconds`` from now are
        given up: what a claim may have claimed comes back through the lease."""
        self._cut_at = anyio.current_time() + seconds
        for scope in self._scopes:
            scope.deadline = self._cut_at
