"""`Queue`: the queue's operations for sync code (threads, Flask, scripts).

Generated from ``pgqueue/aio/queue.py`` by ``tools/unasync.py``: do not edit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from ..core.backoff import Backoff
from ..core.jobs import DEFAULT_QUEUE, Job, JobSpec, JobStatus, Stats, default_worker_name
from ..core.ops import (
    Cancelled,
    Failure,
    Group,
    Heartbeat,
    LimitState,
    QueueCore,
    QueueState,
    Turn,
    WorkerClaim,
)
from ..core.results import JobResult
from ..core.schedules import Schedule, ScheduleState, Tick
from ..core.states import Event
from ..core.tasks import TaskDefaults, TaskDefinition, TaskRegistry
from .driver import CallerConnection, PoolTarget, make_driver
from .tasks import Task
from .waiting import wait_for_result

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Queue"]

P = ParamSpec("P")
R = TypeVar("R")


class Queue:
    """A job queue in one PostgreSQL table, for sync code (threads, Flask, scripts).

    Give it a DSN (it opens a pool of its own) or a pool you manage:

        with pgqueue.Queue("postgresql://localhost/app") as q:
            q.install()
            job_id = q.enqueue("send_receipt", {"order_id": 42})
            for job in q.claim(10, worker="w1"):
                q.complete(job)

    Every method validates its arguments before it touches the database: a
    bad argument raises `TypeError` or `ValueError` and writes nothing.

    ``transaction_pooling=True`` says that the DSN (or pool) reaches the
    server through a transaction pooler such as PgBouncer in transaction
    mode: the queue's connections prepare no statements (a pool of yours
    must be built with ``kwargs={"prepare_threshold": None}``), and neither
    a worker nor `wait` LISTENs through it (docs/pgbouncer.md).
    """

    def __init__(
        self,
        conninfo_or_pool: PoolTarget,
        *,
        table: str = "pgqueue_jobs",
        backoff: Backoff | None = None,
        max_connections: int = 10,
        history: bool = False,
        transaction_pooling: bool = False,
    ) -> None:
        self.core = QueueCore(
            table, backoff=backoff, history=history, transaction_pooling=transaction_pooling
        )
        self._driver = make_driver(
            conninfo_or_pool, max_size=max_connections, transaction_pooling=transaction_pooling
        )
        # Written by `task`; read by the workers made for this queue.
        self.tasks = TaskRegistry()

    @property
    def table(self) -> str:
        """The queue's table, as given (``name`` or ``schema.name``)."""
        return self.core.table

    @property
    def conninfo(self) -> str:
        """The connection string the queue's pool connects with."""
        return self._driver.conninfo

    def connection_settings(self) -> tuple[str, dict[str, Any]]:
        """The conninfo and connection keyword arguments of the queue's pool:
        what a worker's LISTEN connection is made with."""
        return self._driver.connection_settings()

    def open(self, *, wait: bool = True) -> None:
        """Open the queue's own pool now rather than at first use.

        With ``wait`` (the default), connect once first: a server that
        cannot be reached raises `psycopg.OperationalError` with its reason
        (connection refused, password authentication failed, database does
        not exist...) within the DSN's ``connect_timeout`` (else the pool's
        timeout, 30 s), and no pool is left behind: a later call tries
        again. The first call of a queue never opened does the same. Then
        wait until the pool has a connection. ``wait=False`` opens the pool
        and returns at once, the pool connecting in the background and
        retrying until the server answers: what a worker does.
        """
        self._driver.open(wait=wait)

    def close(self) -> None:
        """Close the pool the queue opened (a pool you passed in stays open)."""
        self._driver.close()

    def __enter__(self) -> Queue:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def install(self) -> list[int]:
        """Create or upgrade the queue's schema; return the migrations applied (often none).

        The numbered migrations of `pgqueue.core.migrations` that the table
        lacks are applied in one transaction, one installer at a time
        (an advisory lock), and recorded in ``pgqueue_schema``. They only
        expand the schema: what the previous release still uses stays until
        `contract`. A table
        built by hand with the same columns is adopted in place. Raises
        `pgqueue.SchemaTooNew` if the database is ahead of this library and
        `pgqueue.IncompatibleTable` if a table of that name is not a queue's.
        """
        return self._driver.run(self.core.install())

    def contract(self) -> list[int]:
        """Drop what the releases before this one used and it does not; return the
        migrations whose contract step ran (often none).

        Call it (or ``pgqueue migrate --contract``) once every process that
        uses the table runs this release: `install` only expands the schema,
        keeping what an older release's workers still read (an index their
        claim uses) while a deploy rolls out. It applies the missing
        migrations first, then every pending contract step, in one
        transaction. See docs/migrations.md, "Rolling deploys".
        """
        return self._driver.run(self.core.contract())

    def pending_contract(self) -> dict[int, str]:
        """The contract steps `contract` would run: what each drops, by migration."""
        return self._driver.run(self.core.pending_contract())

    def schema_version(self) -> int | None:
        """The schema version recorded for the table; None if it was never installed."""
        return self._driver.run(self.core.schema_version())

    def uninstall(self) -> None:
        """Drop the queue table with every job in it, its history table and its schema record.

        For tests and teardown; there is no undo.
        """
        self._driver.run(self.core.uninstall())

    def grant(self, role: str, *, read_only: bool = False) -> list[str]:
        """Grant ``role`` what the application and its workers need on this
        queue (its schema, its tables, its id sequence; the history table's
        rows if it has one), or with ``read_only`` what a reader needs
        (``SELECT``, for monitoring or a read-only dashboard). Run it as the
        owner, after `install`; it returns the ``GRANT`` statements it ran.
        See docs/reliability.md, "Least privilege"."""
        return self._driver.run(self.core.grant(role, read_only=read_only))

    def enqueue(
        self,
        kind: str,
        payload: Any = None,
        *,
        run_at: datetime | None = None,
        delay: timedelta | None = None,
        max_attempts: int = 3,
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        unique_key: str | None = None,
        unique: str = "queued",
        unique_for: timedelta | None = None,
        on_duplicate: str = "return",
        result_ttl: timedelta | None = None,
        limit_key: str | None = None,
        depends_on: Sequence[int] | None = None,
        conn: CallerConnection | None = None,
    ) -> int:
        """Add one job and return its id.

        With ``conn=``, the job is written in the caller's transaction: it
        exists if and only if that transaction commits, and idle workers are
        woken at commit. Without it, the queue commits the job at once.
        ``run_at`` (timezone-aware) or ``delay`` postpone it.

        ``queue`` names the queue it waits in; of the jobs a worker serves,
        higher ``priority`` (-100 to 100) runs first. With ``unique_key``,
        at most one job holds the key in the ``unique`` scope (``"queued"``:
        not started yet; ``"active"``: pending or running), or, with
        ``unique_for``, for that long after it was enqueued. A duplicate is
        not written: ``on_duplicate="return"`` returns the holder's id,
        ``"raise"`` raises `pgqueue.DuplicateJob`, ``"replace"`` gives the
        waiting holder this payload and run_at (see docs/unique.md).

        With ``result_ttl``, the job's outcome (and its handler's return
        value) is kept that long after it ends, for `result` and `wait`
        (docs/results.md). With ``limit_key``, it counts against that key's
        limit of running jobs (`set_limit`; one at a time until set; see
        docs/limits.md).

        With ``depends_on`` (a list of job ids), the job waits (status
        ``waiting``) until every one of them has succeeded, and is
        cancelled if one of them dies or is cancelled; an id that never
        existed raises `ValueError` (docs/workflows.md).
        """
        spec = JobSpec(
            kind,
            payload,
            run_at=run_at,
            delay=delay,
            max_attempts=max_attempts,
            queue=queue,
            priority=priority,
            unique_key=unique_key,
            unique=unique,
            unique_for=unique_for,
            on_duplicate=on_duplicate,
            result_ttl=result_ttl,
            limit_key=limit_key,
            depends_on=depends_on,
        )
        return self._enqueue_spec(spec, conn)

    def _enqueue_spec(self, spec: JobSpec, conn: CallerConnection | None = None) -> int:
        """Add the job ``spec`` describes (`enqueue`, and a task's enqueue)."""
        op = self.core.enqueue(spec)
        with op.trace:  # a span, when tracing is on (docs/tracing.md)
            return self._driver.run(op, conn)

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self, /, *, kind: str | None = None, **defaults: Unpack[TaskDefaults]
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(
        self,
        fn: Callable[P, R] | None = None,
        /,
        *,
        kind: str | None = None,
        **defaults: Unpack[TaskDefaults],
    ) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
        """Make a function a task of this queue: a job kind whose jobs call it.

            @queue.task
            def send_receipt(order_id: int) -> None: ...

            @queue.task(kind="reports.nightly", queue="reports", max_attempts=1)
            def nightly_report(day: str) -> None: ...

            send_receipt.enqueue(42)

        Returns an `Task` (calling it still calls the function). ``kind``
        defaults to the function's module-qualified name; ``defaults`` are
        job options of `enqueue` (``queue``, ``priority``, ``max_attempts``,
        ``delay``, ``unique_key``, ``unique``, ``unique_for``,
        ``on_duplicate``, ``result_ttl``, ``limit_key``) for every job of the
        task; ``unique_key`` and ``limit_key`` may be functions of the
        task's arguments. The task is registered with the queue: a worker
        made for it runs its jobs (docs/tasks.md). A bad option, or a
        second function for a kind the queue has, raises `TypeError` or
        `ValueError` here.
        """

        def make(fn: Callable[P, R]) -> Task[P, R]:
            definition = TaskDefinition(fn, kind, defaults)
            self.tasks.add(definition)
            return Task(self, definition, definition.options)

        return make if fn is None else make(fn)

    def enqueue_many(
        self,
        specs: Iterable[JobSpec | tuple[str, Any]],
        *,
        conn: CallerConnection | None = None,
    ) -> list[int]:
        """Add many jobs in one transaction; return their ids in the order given.

        Every spec is validated before anything is written. Large batches
        are written with ``COPY``; one notification is sent per kind.
        """
        op = self.core.enqueue_many(specs)
        with op.trace:  # one span for the batch, when tracing is on
            return self._driver.run(op, conn)

    def chain(
        self, *specs: JobSpec | tuple[str, Any], conn: CallerConnection | None = None
    ) -> list[int]:
        """Add jobs that run one after the other: each waits for the one
        before to succeed (and is cancelled if it dies or is cancelled).
        All of them are written in one transaction (the caller's, with
        ``conn=``); returns their ids in order (docs/workflows.md).

            ids = q.chain(JobSpec("fetch", url), JobSpec("parse"), JobSpec("store"))
        """
        op = self.core.chain(specs)
        with op.trace:
            return self._driver.run(op, conn)

    def group(
        self,
        *specs: JobSpec | tuple[str, Any],
        then: JobSpec | tuple[str, Any] | None = None,
        conn: CallerConnection | None = None,
    ) -> Group:
        """Add jobs that run side by side and, with ``then``, a job that runs
        once after every one of them succeeded (it reads their results with
        `pgqueue.job_context().parents`). All of them are written in one
        transaction (the caller's, with ``conn=``); returns a `pgqueue.Group`
        (``.ids``, ``.then``) (docs/workflows.md).
        """
        op = self.core.group(specs, then)
        with op.trace:
            return self._driver.run(op, conn)

    def claim(
        self,
        limit: int = 20,
        *,
        worker: str | None = None,
        kinds: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
    ) -> list[Job]:
        """Take up to ``limit`` ready jobs (of ``queues`` and ``kinds``, if
        given; of a paused queue, never) in one statement: highest priority
        first, then the earliest due.

        The jobs become ``running``, locked by ``worker``, with one more
        attempt counted. Concurrent claimers never receive the same job.
        """
        name = default_worker_name() if worker is None else worker
        op = self.core.claim(limit, worker=name, kinds=kinds, queues=queues)
        return self._driver.run(op)

    def complete(self, *jobs_or_ids: Job | int) -> int:
        """Record success: delete the running jobs given, in one statement.

        Returns how many were deleted. A job that is not running is left
        alone; a running job is deleted whoever holds it (workers record their
        successes through a statement of their own, which deletes only their own claims).
        """
        done: list[int] = self._driver.run(self.core.complete(jobs_or_ids))
        return len(done)

    def fail(self, job: Job, error: object, *, retry_in: timedelta | None = None) -> JobStatus:
        """Record a failure of a claimed job; return what it became.

        Below ``max_attempts`` the job is deferred by the queue's `Backoff`
        (or by ``retry_in``) and is ``pending`` again; at ``max_attempts`` it is
        ``dead``. ``error`` (an exception or text) is kept in ``last_error``.
        Raises `JobNotRunning` if the job is no longer this claim's to fail.
        """
        failure = self.core.failure(job, error, retry_in=retry_in, event=Event.FAIL)
        written = self._driver.run(self.core.record_failures([failure]))
        return self.core.written_status(failure, written)

    def reap(self, visibility_timeout: timedelta) -> list[int]:
        """Return jobs whose lease is older than ``visibility_timeout`` to ``pending``.

        A reaped job that has used all its attempts becomes ``dead`` instead.
        Returns the ids put back to ``pending``.
        """
        return self._driver.run(self.core.reap(visibility_timeout))

    def get(self, job_id: int) -> Job | None:
        """The job with this id, or None (a succeeded job is gone)."""
        return self._driver.run(self.core.get(job_id))

    def retry(self, job_ids: Iterable[Job | int] | Job | int) -> int:
        """Revive dead jobs: ``pending``, due now, with a fresh set of attempts."""
        return self._driver.run(self.core.retry(job_ids))

    def stats(self, visibility_timeout: timedelta | None = None) -> Stats:
        """Counts by status and by kind, the age of the oldest ready job, and how
        many running jobs hold a lease older than ``visibility_timeout`` (default:
        5 minutes, the workers' default) -- jobs the reaper will take back.

        Never a scan of the whole table: past 50,000 rows, counts go through
        the partial indexes up to a cap and are estimated beyond it, and
        `Stats.estimated` names those that are not exact
        (docs/operations.md, "Counting")."""
        return self._driver.run(self.core.stats(visibility_timeout))

    def cancel(self, *job_ids: Job | int, conn: CallerConnection | None = None) -> Cancelled:
        """Cancel jobs: a waiting or dead job is removed now; a running one is
        asked to stop, and its worker stops it (docs/cancel.md).

        Returns `pgqueue.Cancelled` (``deleted``, ``requested``,
        ``not_found``: ids no longer in the queue). With ``conn=``, in the
        caller's transaction (workers hear of it at commit). A cancelled job
        is never retried, reaped back or marked dead; with history or
        ``result_ttl`` it is recorded as cancelled.
        """
        return self._driver.run(self.core.cancel(job_ids), conn)

    def result(self, job_id: Job | int) -> JobResult | None:
        """Where a job stands, without waiting: `pgqueue.JobResult` with
        ``outcome`` pending, running or dead (its row), or succeeded, dead or
        cancelled (its kept result, ``result_ttl``); None if neither."""
        return self._driver.run(self.core.result(job_id))

    def wait(self, job_id: Job | int, timeout: float = 30.0) -> Any:
        """Wait for a job enqueued with ``result_ttl`` and return its handler's value.

        Raises `pgqueue.JobFailed` if it ended dead or cancelled,
        `TimeoutError` after ``timeout`` seconds, and `pgqueue.NoResult` if it
        is not in the queue and left no result (`pgqueue.JobNotCommitted`
        when the transaction that enqueued it is still open). Wakes on a
        notification, polling as a safety net (docs/results.md).
        """
        return wait_for_result(self, job_id, timeout)

    def set_limit(self, key: str, max_running: int) -> None:
        """Let at most ``max_running`` jobs enqueued with ``limit_key=key`` run
        at once, over every worker (0 holds them all back). Never exceeded
        under concurrent claims, crashes or retries (docs/limits.md)."""
        self._driver.run(self.core.set_limit(key, max_running))

    def set_rate(self, key: str, per_second: float | None, *, burst: int | None = None) -> None:
        """Let jobs enqueued with ``limit_key=key`` start at most ``per_second``
        a second over every worker, and at most ``burst`` at once after a
        pause (default: one second's worth); ``None`` removes the rate. The
        key's concurrency limit (`set_limit`, 1 until set) still holds
        (docs/limits.md)."""
        self._driver.run(self.core.set_rate(key, per_second, burst))

    def limits(self) -> list[LimitState]:
        """Every limit key set or in use: its limit, running and waiting jobs,
        its rate."""
        return self._driver.run(self.core.limits())

    def pause_queue(self, name: str) -> None:
        """Pause a queue: no claim takes its jobs until `resume_queue`.

        Jobs can still be enqueued to it; running ones finish. Kept in
        ``<table>_queues``, so it holds for every worker and survives restarts.
        """
        self._driver.run(self.core.set_paused(name, True))

    def resume_queue(self, name: str) -> None:
        """Resume a paused queue, and wake idle workers."""
        self._driver.run(self.core.set_paused(name, False))

    def queues(self) -> list[QueueState]:
        """Every queue with jobs or that was ever paused: its jobs by status, paused or not.

        Counted as `stats` counts (`QueueState.estimated`: the statuses whose
        count stopped at the cap, on a large table)."""
        return self._driver.run(self.core.queues())

    def schedules(self) -> list[ScheduleState]:
        """Every schedule workers registered (`AsyncWorker.schedule`), by name: its
        definition, paused or not, its last tick and job, and its next tick."""
        return self._driver.run(self.core.schedules())

    def pause_schedule(self, name: str) -> None:
        """Pause a schedule: its ticks enqueue nothing until `resume_schedule`.

        Kept in ``<table>_schedules``: it holds for every worker and survives
        restarts. Raises `pgqueue.UnknownSchedule` if no worker registered it.
        """
        self._driver.run(self.core.set_schedule_paused(name, True))

    def resume_schedule(self, name: str) -> None:
        """Resume a paused schedule from its next tick (the ticks it missed are not made up)."""
        self._driver.run(self.core.set_schedule_paused(name, False))

    def trigger_schedule(self, name: str) -> int:
        """Enqueue a schedule's job now, as its ticks do, and return its id.

        It is not a tick: the schedule's ticks go on as before. A schedule
        with ``overlap=False`` whose previous job is still pending or running
        raises `pgqueue.DuplicateJob` (``.existing_id`` is that job).
        """
        return self._driver.run(self.core.trigger_schedule(name))

    def register_schedules(self, schedules: Sequence[Schedule]) -> None:
        """Write a worker's schedules into the table (for `AsyncWorker`)."""
        self._driver.run(self.core.register_schedules(schedules))

    def schedule_clock(self, names: Sequence[str]) -> tuple[datetime, dict[str, datetime | None]]:
        """The database's clock and the last tick of each schedule named (for `AsyncWorker`)."""
        return self._driver.run(self.core.schedule_clock(names))

    def tick_schedule(self, schedule: Schedule, tick: datetime) -> Tick:
        """Record a schedule's tick and enqueue its job in one statement (for `AsyncWorker`)."""
        return self._driver.run(self.core.tick_schedule(schedule, tick))

    # -- the worker's calls (`pgqueue.aio.worker.calls.QueueCalls`) --------------

    def _settle(
        self, succeeded: Sequence[int], failures: Sequence[Failure], **options: Any
    ) -> tuple[list[int], dict[int, JobStatus]]:
        """Record a worker's batch of outcomes (`pgqueue.core.queue.turn.Turns.settle`)."""
        return self._driver.run(self.core.turns.settle(succeeded, failures, **options))

    def _turn(
        self,
        succeeded: Sequence[int],
        failures: Sequence[Failure],
        claim: WorkerClaim,
        limit: int,
        **options: Any,
    ) -> Turn:
        """Record a worker's outcomes and claim its next batch in one round trip
        (`pgqueue.core.queue.turn.Turns.turn`, which says what ``options`` are)."""
        op = self.core.turns.turn(succeeded, failures, claim, limit, **options)
        return self._driver.run(op)

    def _claim_orphan(
        self,
        *,
        worker: str,
        kinds: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
    ) -> list[Job]:
        """Claim one orphaned job (`Job.orphaned`), which a worker runs alone."""
        op = self.core.claim_orphan(worker=worker, kinds=kinds, queues=queues)
        return self._driver.run(op)

    def _heartbeat(self, job_ids: Sequence[int], *, worker: str) -> Heartbeat:
        """Renew the leases of ``worker``'s running jobs; say which are still
        held, and which of those were asked to stop (`cancel`)."""
        return self._driver.run(self.core.heartbeat(job_ids, worker=worker))

    def _cancel_requests(self, job_ids: Sequence[int]) -> list[int]:
        """Which of these jobs had their cancel requested (for `AsyncWorker`)."""
        return self._driver.run(self.core.cancel_requests(job_ids))

    def _reap_outcomes(self, visibility_timeout: timedelta) -> dict[int, JobStatus]:
        """`reap`, telling what each expired job became (pending, or dead on its last attempt)."""
        return self._driver.run(self.core.reap_outcomes(visibility_timeout))

    def prune_history(self, older_than: timedelta) -> int:
        """Delete history rows that left the queue more than `older_than` ago; return how many.

        The history table (``<table>_history``) is written only by a queue
        made with ``history=True``: each job that succeeds, and each dead job
        purged, is copied there by the statement that deletes it.
        """
        return self._driver.run(self.core.prune_history(older_than))

    def explain_claim(self) -> str:
        """The plan PostgreSQL chooses for the claim query (``EXPLAIN``)."""
        return self._driver.run(self.core.explain_claim())

    def jobs(
        self,
        *,
        status: JobStatus | str | None = None,
        kinds: Iterable[str] | None = None,
        limit: int = 100,
        after_id: int | None = None,
        queues: Iterable[str] | None = None,
    ) -> list[Job]:
        """Up to ``limit`` jobs in id order, of one ``status``, of ``kinds`` and
        of ``queues`` if given.

        ``after_id`` pages: pass the last id of one page to get the next.
        Reads only; a succeeded job has no row and is never listed.
        """
        op = self.core.jobs(status=status, kinds=kinds, limit=limit, after_id=after_id,
                            queues=queues)  # fmt: skip
        return self._driver.run(op)

    def retry_dead(self, *, kinds: Iterable[str] | None = None) -> int:
        """Revive every dead job (of ``kinds``, if given), as `retry` does; return how many.

        Each becomes ``pending``, due now, with a fresh set of attempts; its
        ``last_error`` stays until it fails again. Idle workers are woken.
        """
        return self._driver.run(self.core.retry_dead(kinds=kinds))

    def purge_dead(self, older_than: timedelta, *, kinds: Iterable[str] | None = None) -> int:
        """Delete dead jobs (of ``kinds``, if given) older than ``older_than``; return how many.

        A dead job's ``run_at`` is the moment it died; its age counts from
        there. ``timedelta(0)`` purges every dead job. On a queue made with
        ``history=True``, the statement that deletes them copies them into
        the history table.
        """
        return self._driver.run(self.core.purge_dead(older_than, kinds=kinds))
