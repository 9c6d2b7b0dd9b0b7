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
from .heads import NO_HEADS, ClaimHeads
from .jobs import (
    DEFAULT_QUEUE,
    DEFAULT_VISIBILITY_TIMEOUT,
    LEASE_EXPIRED,
    ROW_STATUSES,
    DuplicateJob,
    Job,
    JobNotRunning,
    JobStatus,
    SpecLike,
    Stats,
    ValidatedSpec,
    error_text,
    validate_age,
    validate_claim_bytes,
    validate_delay,
    validate_ids,
    validate_job_id,
    validate_kinds,
    validate_limit,
    validate_limit_key,
    validate_queue,
    validate_queues,
    validate_rate,
    validate_spec,
    validate_specs,
    validate_status,
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
from .results import JobResult
from .schedules import (
    Schedule,
    ScheduleState,
    Tick,
    UnknownSchedule,
    unique_key_of,
    validate_schedule_name,
)
from .sql import Statements
from .states import Event, next_state
from .tracing import Trace, enqueue_many_trace, enqueue_trace

__all__ = [
    "Cancelled",
    "Copy",
    "Cycle",
    "Heartbeat",
    "LimitState",
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

# How often an enqueue of a unique job tries again when the job holding its
# key left the key's scope between the insert and the look-up (it started,
# or ended): each time, the insert is tried anew.
UNIQUE_TRIES = 5

# Batches of at least this many jobs are written with COPY rather than INSERT.
COPY_THRESHOLD = 200
# ... and so are smaller ones whose payloads (JSON text) weigh more than this:
# INSERT sends them as one array parameter, and neither a parameter nor a
# message may pass 1 GB (the server refuses the statement, or drops the
# connection); COPY sends and parses one row at a time.
COPY_PAYLOAD_BYTES = 2**28


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
    # How many claim-index entries the turn read, dead ones included
    # (`pgqueue.core.heads`).
    walked: int = 0


@dataclass(frozen=True, slots=True)
class QueueState:
    """A queue as `queues()` reports it: paused or not, and its jobs by status."""

    name: str
    paused: bool
    counts: dict[JobStatus, int]


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """What a heartbeat found: the jobs still held (leases renewed), and
    those of them whose cancellation was requested."""

    held: list[int]
    cancel: list[int]


@dataclass(frozen=True, slots=True)
class Cancelled:
    """What `cancel` did: jobs removed at once (waiting or dead), running jobs
    asked to stop, and ids not in the queue (finished, or never there)."""

    deleted: list[int]
    requested: list[int]
    not_found: list[int]


@dataclass(frozen=True, slots=True)
class LimitState:
    """A concurrency limit as `limits()` reports it."""

    key: str
    max_running: int  # 1 until set_limit sets it
    running: int
    waiting: int
    set: bool  # whether set_limit set it
    per_second: float | None = None  # its rate, if set_rate set one
    burst: int | None = None
    tokens: float | None = None  # jobs it may start now, by its rate (whole ones count)


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
        trace = enqueue_trace(self.table, spec.kind, spec.queue)
        plan = self._enqueue_one(spec, trace)
        return Operation(plan, atomic=spec.limit_key is not None, trace=trace)

    def _enqueue_one(self, spec: ValidatedSpec, trace: Trace) -> Plan[int]:
        job_id = yield from self._insert_one(spec, trace.context)
        trace.enqueued((job_id,))
        return job_id

    def _insert_one(self, spec: ValidatedSpec, trace_context: str | None) -> Plan[int]:
        params: dict[str, Any] = {
            "kind": spec.kind,
            "payload": spec.payload_json,
            "run_at": spec.run_at,
            "delay": spec.delay,
            "max_attempts": spec.max_attempts,
            "queue": spec.queue,
            "priority": spec.priority,
            "result_ttl": spec.result_ttl,
            "limit_key": spec.limit_key,
            "trace_context": trace_context,
            "channel": self.channel,
        }
        if spec.limit_key is not None:
            yield Query(self.sql.ensure_slots, {"keys": [spec.limit_key]})
        rule = spec.unique
        if rule is None:
            rows = yield Query(self.sql.enqueue, params)
            return int(rows[0][0])
        params["unique_key"] = rule.key
        if rule.window is not None:
            # The table's name as pg_get_serial_sequence reads it: quoted.
            params.update(window=rule.window, table=self.schema.regclass)
            insert, holder = self.sql.window_insert, self.sql.window_holder
        else:
            insert = self.sql.unique_inserts[rule.scope, rule.on_duplicate == "replace"]
            holder = self.sql.unique_holders[rule.scope]
        for _ in range(UNIQUE_TRIES):
            rows = yield Query(insert, params)
            if rows:
                return int(rows[0][0])  # new, or the waiting holder replaced
            # Taken: by whom? A fresh statement sees a holder that committed
            # while the insert waited for it.
            rows = yield Query(holder, params)
            if not rows:
                continue  # the holder started or ended meanwhile: try again
            existing = int(rows[0][0])
            if rule.on_duplicate == "raise":
                raise DuplicateJob(rule.key, existing)
            if rule.on_duplicate == "replace" and rule.window is not None:
                yield Query(self.sql.window_replace, {**params, "existing": existing})
            return existing
        raise RuntimeError(
            f"unique key {rule.key!r} changed hands {UNIQUE_TRIES} times during one enqueue"
        )

    def enqueue_many(self, specs: Iterable[SpecLike]) -> Operation[list[int]]:
        checked = validate_specs(specs)
        # One span for the batch, whatever its size; its context on every job.
        trace = enqueue_many_trace(self.table, len(checked))

        def plan() -> Plan[list[int]]:
            if not checked:
                return []
            context = trace.context
            # Unique jobs go one by one, each with its key's rule; the rest
            # are written together.
            plain = [s for s in checked if s.unique is None]
            keys = sorted({s.limit_key for s in checked if s.limit_key is not None})
            if keys:
                yield Query(self.sql.ensure_slots, {"keys": keys})
            ids: list[int] = []
            if plain:
                rows = yield Query(self.sql.allocate_ids, (self.schema.regclass, len(plain)))
                db_now, ids = rows[0]
                ids.sort()
                # run_at from the database's clock, so that a skewed client
                # neither runs jobs early nor holds them back.
                records = [
                    (i, s.kind, s.payload_json, s.run_at or db_now + s.delay, s.max_attempts,
                     s.queue, s.priority, s.result_ttl, s.limit_key)
                    for i, s in zip(ids, plain, strict=True)
                ]  # fmt: skip
                if len(records) >= COPY_THRESHOLD or _too_heavy_for_arrays(plain):
                    copy = self.sql.copy_in if context is None else self.sql.copy_in_traced
                    yield Copy(copy, copy_text(records, context))
                else:
                    columns = [list(col) for col in zip(*records, strict=True)]
                    yield Query(self.sql.insert_arrays, [context, *columns])
                kinds = sorted({s.kind for s in plain})
                yield Query(self.sql.notify_kinds, (self.channel, kinds))
            plain_ids = iter(ids)
            out = [next(plain_ids) if s.unique is None else 0 for s in checked]
            # Unique jobs in the order of their keys, whatever the batch's
            # order: batches that share keys wait for each other's keys in
            # one order, and so never deadlock. Equal keys keep their order.
            keyed = sorted(
                (s.unique.key, s.unique.stored_scope, n)
                for n, s in enumerate(checked)
                if s.unique is not None
            )
            for _, _, n in keyed:
                out[n] = yield from self._insert_one(checked[n], context)
            trace.enqueued(out)
            return out

        return Operation(plan(), atomic=True, trace=trace)

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
        orphan = self.sql.orphan_claims["queues" in params, "kinds" in params]
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
        heads: ClaimHeads = NO_HEADS,
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
        records it in full. ``heads``: where the claim starts in each level
        (`pgqueue.core.heads`)."""
        claim = self._claim_params(limit, worker, kinds, queues)
        if validate_claim_bytes(claim_bytes) is not None:
            claim["claim_bytes"] = claim_bytes
        if limited_max is not None:
            claim["limited_max"] = min(validate_limit(limited_max), claim["limit"])
        return self._cycle(succeeded, failures, worker, claim, results, plain, heads)

    def _cycle(
        self,
        succeeded: Sequence[int],
        failures: Sequence[Failure],
        worker: str,
        claim: dict[str, Any],
        results: Mapping[int, str] | None = None,
        plain: bool = False,
        heads: ClaimHeads = NO_HEADS,
    ) -> Operation[Cycle]:
        # Without heads the turn is the statement it was before they existed.
        with_heads = bool(heads.heads)
        claim = {**claim, **heads.params()} if with_heads else dict(claim)
        limit = claim.pop("limit")
        limited_max = claim.pop("limited_max", limit)
        shape = ("queues" in claim, "kinds" in claim, "claim_bytes" in claim)
        limited = self.limits_in_use
        plain = plain and not results
        statement = self.sql.turn(
            *shape,
            limit,
            limited,
            limited_max,
            failures=bool(failures),
            plain=plain,
            heads=with_heads,
        )
        params = {**claim, "worker": worker, "done": list(succeeded)}
        if failures:
            params |= _failure_arrays(failures)
        if not plain:
            params |= _result_arrays(results)

        def plan() -> Plan[Cycle]:
            (
                (done, failed, statuses, claimed, _, slots, token_in, left_free, walked),
            ) = yield Query(statement, params)
            if plain and len(done) < len(params["done"]):
                # A success held a slot or kept a result after all (or its
                # lease was lost, and this finds it gone again).
                seen = set(done)
                rest = [i for i in params["done"] if i not in seen]
                full = self.sql.turn(*shape, 0, False, 0, failures=False)
                rest_params = {**claim, "worker": worker, "done": rest, **_result_arrays(None)}
                ((recorded, _, _, _, _, _, _, freed, _),) = yield Query(full, rest_params)
                done = done + recorded
                left_free += freed
            self.limits_in_use = slots
            if slots and not limited and limit > len(claimed):
                # Limits came into use since the last turn: claim the rest
                # of the batch again, limited jobs included, at once.
                more = limit - len(claimed)
                again = self.sql.turn(
                    *shape,
                    more,
                    True,
                    min(limited_max, more),
                    failures=False,
                    plain=True,
                    heads=with_heads,
                )
                nothing = {**claim, "worker": worker, "done": []}
                ((_, _, _, more, _, _, token_in, _, _),) = yield Query(again, nothing)
                claimed = claimed + more
            written = {i: JobStatus(s) for i, s in zip(failed, statuses, strict=True)}
            jobs = _in_claim_order(map(Job.from_json, claimed))
            return Cycle(done, written, jobs, token_in, left_free, walked)

        return Operation(plan())

    def complete(
        self, jobs_or_ids: Iterable[Job | int], results: Mapping[int, str] | None = None
    ) -> Operation[list[int]]:
        ids = validate_ids(jobs_or_ids)
        params = {"done": ids, **_result_arrays(results)}

        def plan() -> Plan[list[int]]:
            if not ids:
                return []
            ((done, _),) = yield Query(self.sql.complete, params)
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
        return Query(self.sql.record_failures, _failure_arrays(failures))

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
            [(ours,)] = yield Query(self.sql.reap_lock, (self.table,))
            if not ours:
                return {}  # another worker is reaping this table right now
            yield Query(self.sql.prune_leases)
            yield Query(self.sql.prune_results)
            rows = yield Query(self.sql.expired, (timeout,))
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
        def plan() -> Plan[Heartbeat]:
            if not ids:
                return Heartbeat([], [])
            rows = yield Query(self.sql.heartbeat, (list(ids), worker))
            return Heartbeat([r[0] for r in rows], [r[0] for r in rows if r[1]])

        return Operation(plan())

    def cancel_requests(self, ids: Sequence[int]) -> Operation[list[int]]:
        """Which of these jobs had their cancel requested (a worker's look)."""

        def plan() -> Plan[list[int]]:
            if not ids:
                return []
            rows = yield Query(self.sql.cancel_requests, (list(ids),))
            return [r[0] for r in rows]

        return Operation(plan())

    # -- inspection and repair -------------------------------------------

    def get(self, job_id: int) -> Operation[Job | None]:
        (job_id,) = validate_ids([job_id])

        def plan() -> Plan[Job | None]:
            rows = yield Query(self.sql.get, (job_id,))
            return Job.from_row(rows[0]) if rows else None

        return Operation(plan())

    def retry(self, job_ids: Iterable[Job | int] | Job | int) -> Operation[int]:
        ids = validate_ids([job_ids] if isinstance(job_ids, (int, Job)) else job_ids)

        def plan() -> Plan[int]:
            if not ids:
                return 0
            rows = yield Query(self.sql.retry, {"ids": ids, "channel": self.channel})
            return len(rows)

        return Operation(plan())

    # -- job control (docs/cancel.md, docs/results.md, docs/limits.md) ----

    def cancel(self, job_ids: Iterable[Job | int]) -> Operation[Cancelled]:
        """Cancel jobs: waiting and dead ones go now; running ones are asked to stop."""
        ids = sorted(set(validate_ids(job_ids)))
        params = {"ids": ids, "control": self.sql.control_channel}

        def plan() -> Plan[Cancelled]:
            if not ids:
                return Cancelled([], [], [])
            ((deleted, requested, _, _),) = yield Query(self.sql.cancel, params)
            found = set(deleted) | set(requested)
            return Cancelled(sorted(deleted), sorted(requested), [i for i in ids if i not in found])

        return Operation(plan())

    def result(self, job_id: Job | int) -> Operation[JobResult | None]:
        """Where a job stands: its row, else its kept result; None if neither."""
        (job_id,) = validate_ids([job_id])

        def plan() -> Plan[JobResult | None]:
            rows = yield Query(self.sql.result, {"id": job_id})
            return JobResult.from_row(job_id, rows[0]) if rows else None

        return Operation(plan())

    def set_limit(self, key: str, max_running: int) -> Operation[None]:
        """At most ``max_running`` jobs with ``limit_key=key`` run at once."""
        key = validate_limit_key(key)
        if isinstance(max_running, bool) or not isinstance(max_running, int):
            raise TypeError(f"a limit must be an int, not {type(max_running).__name__}")
        if not 0 <= max_running <= 100_000:
            raise ValueError(f"a limit must be from 0 to 100000 running jobs, got {max_running}")
        params = {"key": key, "n": max_running, "channel": self.channel}

        def plan() -> Plan[None]:
            yield Query(self.sql.set_limit, params)

        return Operation(plan())

    def set_rate(
        self, key: str, per_second: float | None, burst: int | None = None
    ) -> Operation[None]:
        """Jobs with ``limit_key=key`` start at most ``per_second`` a second
        over all workers, ``burst`` at once after a pause (default: one
        second's worth); None removes the rate."""
        key = validate_limit_key(key)
        per_second, burst = validate_rate(per_second, burst)
        params = {"key": key, "per_second": per_second, "burst": burst, "channel": self.channel}

        def plan() -> Plan[None]:
            yield Query(self.sql.set_rate, params)

        return Operation(plan())

    def limits(self) -> Operation[list[LimitState]]:
        """Every limit key in use or set, by name."""

        def plan() -> Plan[list[LimitState]]:
            rows = yield Query(self.sql.limit_states)
            return [
                LimitState(
                    key, 1 if limit is None else limit, running, waiting, limit is not None, *rate
                )
                for key, limit, running, waiting, *rate in rows
            ]

        return Operation(plan())

    def stats(self, visibility_timeout: timedelta | None = None) -> Operation[Stats]:
        timeout = validate_timeout(
            DEFAULT_VISIBILITY_TIMEOUT if visibility_timeout is None else visibility_timeout,
            "visibility_timeout",
        )

        def plan() -> Plan[Stats]:
            rows = yield Query(self.sql.stats, (timeout,))
            by_status = dict.fromkeys(ROW_STATUSES, 0)
            by_kind: dict[str, dict[JobStatus, int]] = {}
            by_queue: dict[str, dict[JobStatus, int]] = {}
            by_priority: dict[int, dict[JobStatus, int]] = {}
            ages = []
            expired = 0
            for queue, priority, kind, status, count, age, past_lease in rows:
                st = JobStatus(status)
                by_status[st] += count
                for table, key in ((by_kind, kind), (by_queue, queue), (by_priority, priority)):
                    table.setdefault(key, dict.fromkeys(ROW_STATUSES, 0))[st] += count
                if age is not None:
                    ages.append(age)
                expired += past_lease
            oldest = max(ages, default=None)
            return Stats(
                by_status,
                dict(sorted(by_kind.items())),
                oldest,
                expired,
                dict(sorted(by_queue.items())),
                dict(sorted(by_priority.items(), reverse=True)),
            )

        return Operation(plan())

    def set_paused(self, queue: str, paused: bool) -> Operation[None]:
        """Pause a queue (claims leave its jobs alone) or resume it (and wake workers)."""
        params = {"queue": validate_queue(queue), "paused": paused, "channel": self.channel}

        def plan() -> Plan[None]:
            yield Query(self.sql.set_paused, params)

        return Operation(plan())

    def queues(self) -> Operation[list[QueueState]]:
        """Every queue with jobs or a pause record, by name."""

        def plan() -> Plan[list[QueueState]]:
            rows = yield Query(self.sql.queue_states)
            found: dict[str, QueueState] = {}
            for name, paused, status, count in rows:
                state = found.setdefault(
                    name, QueueState(name, paused, dict.fromkeys(ROW_STATUSES, 0))
                )
                state.counts[JobStatus(status)] += count
            return list(found.values())

        return Operation(plan())

    def explain_claim(self) -> Operation[str]:
        def plan() -> Plan[str]:
            rows = yield Query(self.sql.explain_claim, {"worker": "explain"})
            return "\n".join(r[0] for r in rows)

        return Operation(plan())

    def prune_history(self, older_than: timedelta) -> Operation[int]:
        age = validate_timeout(older_than, "older_than")

        def plan() -> Plan[int]:
            ((count,),) = yield Query(self.sql.prune_history, (age,))
            return int(count)

        return Operation(plan())

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
        params = {
            "status": None if status is None else validate_status(status).value,
            "kinds": validate_kinds(kinds),
            "queues": validate_queues(queues),
            "limit": validate_limit(limit),
            "after_id": None if after_id is None else validate_job_id(after_id, "after_id"),
        }

        def plan() -> Plan[list[Job]]:
            rows = yield Query(self.sql.jobs, params)
            return [Job.from_row(r) for r in rows]

        return Operation(plan())

    def retry_dead(self, *, kinds: Iterable[str] | None = None) -> Operation[int]:
        """Every dead job (of `kinds`) back to pending: `retry` for all of them."""
        params = {"kinds": validate_kinds(kinds), "channel": self.channel}

        def plan() -> Plan[int]:
            [(revived, _notified)] = yield Query(self.sql.retry_dead, params)
            return int(revived)

        return Operation(plan())

    def purge_dead(
        self, older_than: timedelta, *, kinds: Iterable[str] | None = None
    ) -> Operation[int]:
        """Delete jobs that died more than `older_than` ago (a dead job's run_at)."""
        params = {
            "older_than": validate_age(older_than, "older_than"),
            "kinds": validate_kinds(kinds),
        }

        def plan() -> Plan[int]:
            [(purged,)] = yield Query(self.sql.purge_dead, params)
            return int(purged)

        return Operation(plan())

    # -- schedules (pgqueue.core.schedules) -------------------------------------

    def register_schedules(self, schedules: Sequence[Schedule]) -> Operation[None]:
        """Write a worker's schedules into the table (new ones start now)."""
        rows = [
            {"name": s.name, "kind": s.kind, "cron": s.cron and s.cron.expression,
             "every": s.every, "tz": s.tz, "payload": s.payload_json, "queue": s.queue,
             "priority": s.priority, "overlap": s.overlap}
            for s in schedules
        ]  # fmt: skip

        def plan() -> Plan[None]:
            for row in rows:
                yield Query(self.sql.register_schedule, row)

        return Operation(plan(), atomic=True)

    def schedule_clock(
        self, names: Sequence[str]
    ) -> Operation[tuple[datetime, dict[str, datetime | None]]]:
        """The database's clock, and the last tick of each schedule named that has a row."""

        def plan() -> Plan[tuple[datetime, dict[str, datetime | None]]]:
            [(now, found, ticks)] = yield Query(self.sql.schedule_clock, {"names": list(names)})
            return now, dict(zip(found, ticks, strict=True))

        return Operation(plan())

    def tick_schedule(self, schedule: Schedule, tick: datetime) -> Operation[Tick]:
        """Record `tick` and enqueue its job, in one statement, unless it is recorded already."""
        # The table's name as pg_get_serial_sequence reads it: quoted.
        params = {
            "name": schedule.name, "tick": tick, "table": self.schema.regclass,
            "kind": schedule.kind, "payload": schedule.payload_json, "queue": schedule.queue,
            "priority": schedule.priority, "unique_key": schedule.unique_key,
            "channel": self.channel,
        }  # fmt: skip

        def plan() -> Plan[Tick]:
            [(won, paused, job_id, now, _)] = yield Query(
                self.sql.schedule_ticks[schedule.overlap], params
            )
            return Tick(won, job_id, paused, now)

        return Operation(plan())

    def schedules(self) -> Operation[list[ScheduleState]]:
        """Every schedule in the table, by name, with its next tick by the database's clock."""

        def plan() -> Plan[list[ScheduleState]]:
            rows = yield Query(self.sql.schedule_states)
            return [ScheduleState.from_row(row) for row in rows]

        return Operation(plan())

    def set_schedule_paused(self, name: str, paused: bool) -> Operation[None]:
        """Pause a schedule (its ticks enqueue nothing) or resume it (from now on)."""
        name = validate_schedule_name(name)
        params = {"name": name, "paused": paused}

        def plan() -> Plan[None]:
            if not (yield Query(self.sql.set_schedule_paused, params)):
                raise UnknownSchedule(name)

        return Operation(plan())

    def trigger_schedule(self, name: str) -> Operation[int]:
        """Enqueue a schedule's job now, from its row; not a tick. With overlap=False,
        `DuplicateJob` if its previous job is still pending or running."""
        name = validate_schedule_name(name)
        key = unique_key_of(name)
        params = {"name": name, "unique_key": key, "channel": self.channel}

        def plan() -> Plan[int]:
            for _ in range(UNIQUE_TRIES):
                [(found, job_id, _)] = yield Query(self.sql.trigger_schedule, params)
                if not found:
                    raise UnknownSchedule(name)
                if job_id is not None:
                    return int(job_id)
                rows = yield Query(self.sql.unique_holders["active"], params)
                if rows:
                    raise DuplicateJob(key, int(rows[0][0]))
            raise RuntimeError(f"unique key {key!r} changed hands {UNIQUE_TRIES} times")

        return Operation(plan())


def _too_heavy_for_arrays(specs: Sequence[ValidatedSpec]) -> bool:
    """Whether a small batch's payloads are too big to travel as one array."""
    return sum(len(s.payload_json) for s in specs) > COPY_PAYLOAD_BYTES


# COPY's text format: these four characters are written as escapes.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def copy_text(
    records: Iterable[tuple[int, str, str, datetime, int, str, int, timedelta | None, str | None]],
    trace_context: str | None = None,
) -> bytes:
    """Rows of `INSERT_COLUMNS` (id, kind, payload JSON, run_at, max_attempts,
    queue, priority, result_ttl, limit_key) in COPY's text format; with a
    ``trace_context``, each row ends with it (for `Statements.copy_in_traced`).

    Formatting here, in one pass, costs a fraction of psycopg's per-row
    ``write_row`` for the simple types of a job. A batch repeats a few kinds
    and run_at values many times: each is escaped or formatted once.
    """
    texts: dict[str, str] = {}  # kinds and queue names, escaped
    times: dict[datetime, str] = {}
    lines = []
    end = "\n" if trace_context is None else f"\t{trace_context.translate(_COPY_ESCAPES)}\n"
    for job_id, kind, payload, run_at, max_attempts, queue, priority, ttl, key in records:
        k = texts.get(kind)
        if k is None:
            k = texts[kind] = kind.translate(_COPY_ESCAPES)
        q = texts.get(queue)
        if q is None:
            q = texts[queue] = queue.translate(_COPY_ESCAPES)
        t = times.get(run_at)
        if t is None:
            t = times[run_at] = run_at.isoformat()
        # JSON text has no raw tab, newline or carriage return: only backslashes to double.
        p = payload.replace("\\", "\\\\")
        r = "\\N" if ttl is None else f"{ttl.total_seconds()} seconds"
        lk = "\\N" if key is None else texts.get(key)
        if lk is None:
            assert key is not None
            lk = texts[key] = key.translate(_COPY_ESCAPES)
        lines.append(f"{job_id}\t{k}\t{p}\t{t}\t{max_attempts}\t{q}\t{priority}\t{r}\t{lk}{end}")
    return "".join(lines).encode()


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
