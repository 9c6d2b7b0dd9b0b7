"""Each queue operation as a plan (see `pgqueue.core.plans`): the decisions, no I/O.

`QueueCore` builds the plans for one table; the sync backend and both async
drivers run the very same plans (see `pgqueue.sync.driver` and
`pgqueue.aio.driver`), so what to write and what follows from what was read
is decided here, once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from .backoff import Backoff
from .jobs import (
    DEFAULT_QUEUE,
    LEASE_EXPIRED,
    Job,
    JobNotRunning,
    JobStatus,
    SpecLike,
    Stats,
    error_text,
    validate_claim_bytes,
    validate_delay,
    validate_ids,
    validate_kinds,
    validate_limit,
    validate_queues,
    validate_spec,
    validate_timeout,
)
from .migrations import (
    SchemaNames,
    contract_plan,
    grant_plan,
    install_plan,
    pending_contract_plan,
    uninstall_plan,
    validate_role,
    version_plan,
)
from .plans import Copy, Operation, Plan, Query, Rows, Step, drive, needs_transaction
from .pooling import validate_transaction_pooling
from .queue import control, enqueue, inspect, limits, maintenance, operators
from .queue import schedules as schedules_sql
from .queue.inspect import QueueState
from .queue.limits import LimitState
from .queue.maintenance import Heartbeat
from .results import JobResult
from .schedules import (
    Schedule,
    ScheduleState,
    Tick,
)
from .sql import Statements
from .states import Event, next_state

__all__ = [
    "Cancelled",
    "Copy",
    "Cycle",
    "Heartbeat",
    "LimitState",
    "QueueState",
    "Operation",
    "Plan",
    "QueueCore",
    "Query",
    "Rows",
    "Step",
    "drive",
    "needs_transaction",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Cycle:
    """What one turn of a worker's cycle wrote and claimed."""

    completed: list[int]
    failed: dict[int, JobStatus]
    claimed: list[Job]
    # In how many seconds a key with a rate (`set_rate`) whose jobs the turn
    # left for want of a token has one again; None if no key waits so.
    token_in: float | None = None
    # How many limit slots its outcomes left free: slots handed straight to a
    # waiting job of their key (claimed by this very turn) are not counted.
    slots_left_free: int = 0


@dataclass(frozen=True, slots=True)
class Cancelled:
    """What `cancel` did: jobs removed at once (waiting or dead), running jobs
    asked to stop, and ids not in the queue (finished, or never there)."""

    deleted: list[int]
    requested: list[int]
    not_found: list[int]


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed (or expired, or released) job, ready to be recorded."""

    job_id: int
    attempts: int
    locked_by: str | None
    new_attempts: int
    status: JobStatus
    delay: timedelta
    error: str | None


class QueueCore:
    """Everything a queue decides, for one table, with no I/O.

    `pgqueue.Queue` and `pgqueue.AsyncQueue` hold one and hand its
    operations to their driver.
    """

    def __init__(
        self,
        table: str = "pgqueue_jobs",
        *,
        backoff: Backoff | None = None,
        history: bool = False,
        transaction_pooling: bool = False,
    ) -> None:
        self.sql = Statements(table, history=history)
        # Whether the queue's connections go through a transaction pooler
        # (`pgqueue.core.pooling`): no prepared statements, no LISTEN on them.
        self.transaction_pooling = validate_transaction_pooling(transaction_pooling)
        self.schema = SchemaNames.for_table(table)
        self.backoff = backoff if backoff is not None else Backoff()
        # Whether the table has limit slots, as the last worker's turn saw it
        # (written by `cycle`'s plans, read when the next turn is built):
        # while it has none, turns leave the claim of limited jobs out. A
        # table's first slot comes with its first limited job, whose
        # notification wakes the workers: the next turn includes them.
        self.limits_in_use = True

    @property
    def table(self) -> str:
        return self.sql.table_name

    def options(self) -> dict[str, Any]:
        """The keyword arguments that make another queue on this table behave like this one."""
        return {
            "table": self.table,
            "backoff": self.backoff,
            "history": self.sql.history,
            "transaction_pooling": self.transaction_pooling,
        }

    @property
    def channel(self) -> str:
        return self.sql.channel

    # -- schema ---------------------------------------------------------

    def install(self) -> Operation[list[int]]:
        """Apply the missing schema migrations, in one transaction."""
        return Operation(install_plan(self.schema), atomic=True)

    def contract(self) -> Operation[list[int]]:
        """Apply the missing migrations, then the pending contract steps, in one transaction."""
        return Operation(contract_plan(self.schema), atomic=True)

    def pending_contract(self) -> Operation[dict[int, str]]:
        return Operation(pending_contract_plan(self.schema))

    def schema_version(self) -> Operation[int | None]:
        return Operation(version_plan(self.schema))

    def uninstall(self) -> Operation[None]:
        return Operation(uninstall_plan(self.schema), atomic=True)

    def grant(self, role: str, *, read_only: bool = False) -> Operation[list[str]]:
        """Grant a role what the runtime (or a reader) needs; see `grant_plan`."""
        validate_role(role)
        if not isinstance(read_only, bool):
            raise TypeError(f"read_only must be a bool, not {type(read_only).__name__}")
        return Operation(grant_plan(self.schema, role, read_only=read_only), atomic=True)

    # -- enqueue --------------------------------------------------------

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
    ) -> Operation[int]:
        spec = validate_spec(
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
        )
        return enqueue.enqueue_one(self.sql.enqueues, self.sql.limits, self.schema, spec)

    def enqueue_many(self, specs: Iterable[SpecLike]) -> Operation[list[int]]:
        return enqueue.enqueue_many(self.sql.enqueues, self.sql.limits, self.schema, specs)

    # -- claim and outcomes ---------------------------------------------

    def _claim_params(
        self,
        limit: int,
        worker: str,
        kinds: Iterable[str] | None,
        queues: Iterable[str] | None = None,
    ) -> dict[str, Any]:
        """A claim's validated parameters; ``kinds`` and ``queues`` are present
        only to filter by them."""
        limit = validate_limit(limit)
        kind_list = validate_kinds(kinds)
        queue_list = validate_queues(queues)
        if not isinstance(worker, str) or not worker or "\x00" in worker:
            raise ValueError("worker must be a non-empty str")
        params: dict[str, Any] = {"worker": worker, "limit": limit}
        if kind_list is not None:
            params["kinds"] = kind_list
        if queue_list is not None:
            params["queues"] = queue_list
        return params

    def claim(
        self,
        limit: int = 20,
        *,
        worker: str,
        kinds: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
    ) -> Operation[list[Job]]:
        params = self._claim_params(limit, worker, kinds, queues)
        statement = self.sql.claim_for("queues" in params, "kinds" in params, params.pop("limit"))
        return self._claim(statement, params)

    def claim_orphan(
        self,
        *,
        worker: str,
        kinds: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
    ) -> Operation[list[Job]]:
        """Claim one orphaned job (`Job.orphaned`), for a worker to run alone."""
        params = self._claim_params(1, worker, kinds, queues)
        orphan = self.sql.claims.orphan_claims["queues" in params, "kinds" in params]
        return self._claim(orphan, params)

    def _claim(self, statement: bytes, params: dict[str, Any]) -> Operation[list[Job]]:
        def plan() -> Plan[list[Job]]:
            rows = yield Query(statement, params)
            return _in_claim_order(map(Job.from_row, rows))

        return Operation(plan())

    def cycle(
        self,
        succeeded: Sequence[int],
        failures: Sequence[Failure],
        *,
        worker: str,
        limit: int,
        kinds: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
        claim_bytes: int | None = None,
        results: Mapping[int, str] | None = None,
        limited_max: int | None = None,
        plain: bool = False,
    ) -> Operation[Cycle]:
        """One turn of a worker: record its outcomes and claim its next batch,
        in one statement (see `Statements.cycle`); the batch stops at the job
        whose payload takes it past ``claim_bytes``, if given. ``results``: the
        return values (JSON text) of the successes that keep one. Of limited
        jobs, it takes at most ``limited_max`` (a worker: its concurrency, so
        that it holds no slot for a job that waits for a runner). ``plain``:
        the caller knows that no success holds a limit slot or keeps a
        result (a worker knows from its `Job`), and the statement leaves
        that bookkeeping out; should one do either, a second statement
        records it in full."""
        claim = self._claim_params(limit, worker, kinds, queues)
        if validate_claim_bytes(claim_bytes) is not None:
            claim["claim_bytes"] = claim_bytes
        if limited_max is not None:
            claim["limited_max"] = min(validate_limit(limited_max), claim["limit"])
        return self._cycle(succeeded, failures, worker, claim, results, plain)

    def _cycle(
        self,
        succeeded: Sequence[int],
        failures: Sequence[Failure],
        worker: str,
        claim: dict[str, Any],
        results: Mapping[int, str] | None = None,
        plain: bool = False,
    ) -> Operation[Cycle]:
        claim = dict(claim)
        limit = claim.pop("limit")
        limited_max = claim.pop("limited_max", limit)
        shape = ("queues" in claim, "kinds" in claim, "claim_bytes" in claim)
        limited = self.limits_in_use
        plain = plain and not results
        statement = self.sql.turn(
            *shape, limit, limited, limited_max, failures=bool(failures), plain=plain
        )
        params = {**claim, "worker": worker, "done": list(succeeded)}
        if failures:
            params |= _failure_arrays(failures)
        if not plain:
            params |= _result_arrays(results)

        def plan() -> Plan[Cycle]:
            ((done, failed, statuses, claimed, _, slots, token_in, left_free),) = yield Query(
                statement, params
            )
            if plain and len(done) < len(params["done"]):
                # A success held a slot or kept a result after all (or its
                # lease was lost, and this finds it gone again).
                seen = set(done)
                rest = [i for i in params["done"] if i not in seen]
                full = self.sql.turn(*shape, 0, False, 0, failures=False)
                rest_params = {**claim, "worker": worker, "done": rest, **_result_arrays(None)}
                ((recorded, _, _, _, _, _, _, freed),) = yield Query(full, rest_params)
                done = done + recorded
                left_free += freed
            self.limits_in_use = slots
            if slots and not limited and limit > len(claimed):
                # Limits came into use since the last turn: claim the rest
                # of the batch again, limited jobs included, at once.
                more = limit - len(claimed)
                again = self.sql.turn(
                    *shape, more, True, min(limited_max, more), failures=False, plain=True
                )
                nothing = {**claim, "worker": worker, "done": []}
                ((_, _, _, more, _, _, token_in, _),) = yield Query(again, nothing)
                claimed = claimed + more
            written = {i: JobStatus(s) for i, s in zip(failed, statuses, strict=True)}
            jobs = _in_claim_order(map(Job.from_json, claimed))
            return Cycle(done, written, jobs, token_in, left_free)

        return Operation(plan())

    def complete(
        self, jobs_or_ids: Iterable[Job | int], results: Mapping[int, str] | None = None
    ) -> Operation[list[int]]:
        ids = validate_ids(jobs_or_ids)
        params = {"done": ids, **_result_arrays(results)}

        def plan() -> Plan[list[int]]:
            if not ids:
                return []
            ((done, _),) = yield Query(self.sql.outcomes.complete, params)
            return list(done)

        return Operation(plan())

    def failure(
        self, job: Job, error: object, *, retry_in: timedelta | None = None, event: Event
    ) -> Failure:
        """Decide what a failed, expired or released job becomes."""
        if not isinstance(job, Job):
            raise TypeError(f"expected a Job, got {type(job).__name__}")
        if retry_in is not None:
            validate_delay(retry_in, "retry_in")
        status = next_state(job.status, event, attempts=job.attempts, max_attempts=job.max_attempts)
        assert isinstance(status, JobStatus)
        new_attempts = job.attempts
        if event is Event.RELEASE:
            # The job never started: give its attempt back.
            new_attempts = max(job.attempts - 1, 0)
            delay = timedelta(0)
        elif retry_in is not None:
            delay = retry_in
        elif event is Event.EXPIRE or event is Event.CANCEL:
            delay = timedelta(0)
        else:
            delay = self.backoff.delay(job.attempts)
        text = None if event is Event.RELEASE else error_text(error)
        return Failure(job.id, job.attempts, job.locked_by, new_attempts, status, delay, text)

    def record_failures(self, failures: Sequence[Failure]) -> Operation[dict[int, JobStatus]]:
        def plan() -> Plan[dict[int, JobStatus]]:
            if not failures:
                return {}
            rows = yield self._failures_query(failures)
            return _written(rows)

        return Operation(plan())

    def written_status(self, failure: Failure, written: dict[int, JobStatus]) -> JobStatus:
        """The status a recorded failure left, or `JobNotRunning` if nothing was written."""
        try:
            return written[failure.job_id]
        except KeyError:
            raise JobNotRunning(
                f"job {failure.job_id} is not running under attempt {failure.attempts}; "
                "its lease probably expired"
            ) from None

    def settle(
        self,
        succeeded: Sequence[int],
        failures: Sequence[Failure],
        *,
        worker: str,
        results: Mapping[int, str] | None = None,
    ) -> Operation[tuple[list[int], dict[int, JobStatus]]]:
        """A worker's batch of outcomes, in one statement whatever its size: a
        turn of the cycle that claims nothing. Successes are fenced by the
        worker's name, failures by their claim."""
        turn = self._cycle(succeeded, failures, worker, {"limit": 0}, results)

        def plan() -> Plan[tuple[list[int], dict[int, JobStatus]]]:
            if not succeeded and not failures:
                return [], {}
            done = yield from turn.plan
            return done.completed, done.failed

        return Operation(plan())

    def _failures_query(self, failures: Sequence[Failure]) -> Query:
        return Query(self.sql.outcomes.record_failures, _failure_arrays(failures))

    def reap(self, visibility_timeout: timedelta) -> Operation[list[int]]:
        outcomes = self.reap_outcomes(visibility_timeout)

        def plan() -> Plan[list[int]]:
            written = yield from outcomes.plan
            return [job_id for job_id, status in written.items() if status is JobStatus.PENDING]

        return Operation(plan(), atomic=True)

    def reap_outcomes(self, visibility_timeout: timedelta) -> Operation[dict[int, JobStatus]]:
        """`reap`, telling what each expired job became: ``pending``, or ``dead``
        when its lease expired on its last attempt (a worker reports both)."""
        timeout = validate_timeout(visibility_timeout, "visibility_timeout")

        def plan() -> Plan[dict[int, JobStatus]]:
            [(ours,)] = yield Query(self.sql.maintenance.reap_lock, (self.table,))
            if not ours:
                return {}  # another worker is reaping this table right now
            yield Query(self.sql.maintenance.prune_leases)
            yield Query(self.sql.maintenance.prune_results)
            rows = yield Query(self.sql.maintenance.expired, (timeout,))
            failures = [
                self.failure(
                    _running_stub(job_id, attempts, max_attempts, locked_by),
                    f"{LEASE_EXPIRED}: no word from worker {locked_by!r} for {timeout}",
                    event=Event.EXPIRE,
                )
                for job_id, attempts, max_attempts, locked_by in rows
            ]
            if not failures:
                return {}
            written = yield self._failures_query(failures)
            return _written(written)

        return Operation(plan(), atomic=True)

    def heartbeat(self, ids: Sequence[int], *, worker: str) -> Operation[Heartbeat]:
        return maintenance.heartbeat(self.sql.maintenance, ids, worker)

    def cancel_requests(self, ids: Sequence[int]) -> Operation[list[int]]:
        """Which of these jobs had their cancel requested (a worker's look)."""
        return maintenance.cancel_requests(self.sql.maintenance, ids)

    # -- inspection and repair -------------------------------------------

    def get(self, job_id: int) -> Operation[Job | None]:
        return operators.get(self.sql.operators, job_id)

    def retry(self, job_ids: Iterable[Job | int] | Job | int) -> Operation[int]:
        return operators.retry(self.sql.operators, self.channel, job_ids)

    # -- job control (docs/cancel.md, docs/results.md, docs/limits.md) ----

    def cancel(self, job_ids: Iterable[Job | int]) -> Operation[Cancelled]:
        """Cancel jobs: waiting and dead ones go now; running ones are asked to stop."""
        ids = sorted(set(validate_ids(job_ids)))
        params = {"ids": ids, "control": self.sql.control_channel}

        def plan() -> Plan[Cancelled]:
            if not ids:
                return Cancelled([], [], [])
            ((deleted, requested, _, _),) = yield Query(self.sql.outcomes.cancel, params)
            found = set(deleted) | set(requested)
            return Cancelled(sorted(deleted), sorted(requested), [i for i in ids if i not in found])

        return Operation(plan())

    def result(self, job_id: Job | int) -> Operation[JobResult | None]:
        """Where a job stands: its row, else its kept result; None if neither."""
        return control.result(self.sql.control, job_id)

    def set_limit(self, key: str, max_running: int) -> Operation[None]:
        """At most ``max_running`` jobs with ``limit_key=key`` run at once."""
        return limits.set_limit(self.sql.limits, self.channel, key, max_running)

    def set_rate(
        self, key: str, per_second: float | None, burst: int | None = None
    ) -> Operation[None]:
        """Jobs with ``limit_key=key`` start at most ``per_second`` a second
        over all workers, ``burst`` at once after a pause (default: one
        second's worth); None removes the rate."""
        return limits.set_rate(self.sql.limits, self.channel, key, per_second, burst)

    def limits(self) -> Operation[list[LimitState]]:
        """Every limit key in use or set, by name."""
        return limits.limit_states(self.sql.limits)

    def stats(self, visibility_timeout: timedelta | None = None) -> Operation[Stats]:
        return inspect.stats(self.sql.inspect, visibility_timeout)

    def set_paused(self, queue: str, paused: bool) -> Operation[None]:
        """Pause a queue (claims leave its jobs alone) or resume it (and wake workers)."""
        return control.set_paused(self.sql.control, self.channel, queue, paused)

    def queues(self) -> Operation[list[QueueState]]:
        """Every queue with jobs or a pause record, by name."""
        return inspect.queue_states(self.sql.inspect)

    def explain_claim(self) -> Operation[str]:
        def plan() -> Plan[str]:
            rows = yield Query(self.sql.explain_claim, {"worker": "explain"})
            return "\n".join(r[0] for r in rows)

        return Operation(plan())

    def prune_history(self, older_than: timedelta) -> Operation[int]:
        return maintenance.prune_history(self.sql.maintenance, older_than)

    # -- for operators -----------------------------------------------------

    def jobs(
        self,
        *,
        status: JobStatus | str | None = None,
        kinds: Iterable[str] | None = None,
        limit: int = 100,
        after_id: int | None = None,
        queues: Iterable[str] | None = None,
    ) -> Operation[list[Job]]:
        """A page of jobs in id order; `after_id` continues after the last one seen."""
        return operators.jobs(
            self.sql.operators,
            status=status,
            kinds=kinds,
            limit=limit,
            after_id=after_id,
            queues=queues,
        )

    def retry_dead(self, *, kinds: Iterable[str] | None = None) -> Operation[int]:
        """Every dead job (of `kinds`) back to pending: `retry` for all of them."""
        return operators.retry_dead(self.sql.operators, self.channel, kinds)

    def purge_dead(
        self, older_than: timedelta, *, kinds: Iterable[str] | None = None
    ) -> Operation[int]:
        """Delete jobs that died more than `older_than` ago (a dead job's run_at)."""
        return operators.purge_dead(self.sql.operators, older_than, kinds)

    # -- schedules (pgqueue.core.schedules) -------------------------------------

    def register_schedules(self, schedules: Sequence[Schedule]) -> Operation[None]:
        """Write a worker's schedules into the table (new ones start now)."""
        return schedules_sql.register_schedules(self.sql.schedules, schedules)

    def schedule_clock(
        self, names: Sequence[str]
    ) -> Operation[tuple[datetime, dict[str, datetime | None]]]:
        """The database's clock, and the last tick of each schedule named that has a row."""
        return schedules_sql.schedule_clock(self.sql.schedules, names)

    def tick_schedule(self, schedule: Schedule, tick: datetime) -> Operation[Tick]:
        """Record `tick` and enqueue its job, in one statement, unless it is recorded already."""
        return schedules_sql.tick_schedule(
            self.sql.schedules, self.channel, self.schema.regclass, schedule, tick
        )

    def schedules(self) -> Operation[list[ScheduleState]]:
        """Every schedule in the table, by name, with its next tick by the database's clock."""
        return schedules_sql.schedule_states(self.sql.schedules)

    def set_schedule_paused(self, name: str, paused: bool) -> Operation[None]:
        """Pause a schedule (its ticks enqueue nothing) or resume it (from now on)."""
        return schedules_sql.set_schedule_paused(self.sql.schedules, name, paused)

    def trigger_schedule(self, name: str) -> Operation[int]:
        """Enqueue a schedule's job now, from its row; not a tick. With overlap=False,
        `DuplicateJob` if its previous job is still pending or running."""
        holder = self.sql.enqueues.unique_holders["active"]
        return schedules_sql.trigger_schedule(self.sql.schedules, holder, self.channel, name)


def _failure_arrays(failures: Sequence[Failure]) -> dict[str, list[Any]]:
    """The parameters of `Statements.record_failures`: one array per column."""
    return {
        "f_id": [f.job_id for f in failures],
        "f_attempts": [f.attempts for f in failures],
        "f_locked_by": [f.locked_by for f in failures],
        "f_new_attempts": [f.new_attempts for f in failures],
        "f_status": [f.status.value for f in failures],
        "f_delay": [f.delay for f in failures],
        "f_error": [f.error for f in failures],
    }


def _result_arrays(results: Mapping[int, str] | None) -> dict[str, list[Any]]:
    """The return values a statement that records successes keeps (JSON text)."""
    if not results:
        return {"r_id": [], "r_value": []}
    return {"r_id": list(results), "r_value": list(results.values())}


def _written(rows: Rows) -> dict[int, JobStatus]:
    """What the failures statement wrote: each job's status after it."""
    ((ids, statuses, _),) = rows
    return {i: JobStatus(s) for i, s in zip(ids, statuses, strict=True)}


def _in_claim_order(jobs: Iterable[Job]) -> list[Job]:
    # RETURNING promises no order; the claim's is priority (highest first), run_at, id.
    return sorted(jobs, key=lambda j: (-j.priority, j.run_at, j.id))


def _running_stub(job_id: int, attempts: int, max_attempts: int, locked_by: str | None) -> Job:
    """Just enough of a running job for the state machine to judge it."""
    epoch = datetime.min
    return Job(
        id=job_id,
        kind="",
        payload=None,
        attempts=attempts,
        max_attempts=max_attempts,
        status=JobStatus.RUNNING,
        run_at=epoch,
        last_error=None,
        locked_by=locked_by,
        locked_at=None,
        created_at=epoch,
    )
