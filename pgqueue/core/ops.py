"""Each queue operation as a plan (see `pgqueue.core.plans`): the decisions, no I/O.

`QueueCore` builds the plans for one table; the sync backend and both async
drivers run the very same plans (see `pgqueue.sync.driver` and
`pgqueue.aio.driver`), so what to write and what follows from what was read
is decided here, once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar, Unpack

from .backoff import Backoff
from .jobs import Job, JobSpec, JobStatus, Stats
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
from .queue import claim as claim_plans
from .queue import (
    control,
    depends,
    enqueue,
    inspect,
    limits,
    maintenance,
    operators,
    outcomes,
    workflows,
)
from .queue import schedules as schedules_sql
from .queue.depends import Group
from .queue.enqueue import COPY_THRESHOLD
from .queue.inspect import QueueState
from .queue.limits import LimitState
from .queue.maintenance import Heartbeat
from .queue.outcomes import Cancelled, Failure
from .queue.turn import Turn, Turns, WorkerClaim
from .results import JobResult
from .schedules import (
    Schedule,
    ScheduleState,
    Tick,
)
from .specs import SpecLike, validate_spec
from .sql import Statements
from .states import Event

__all__ = [
    "COPY_THRESHOLD",
    "Failure",
    "Cancelled",
    "Group",
    "Copy",
    "Turn",
    "Heartbeat",
    "LimitState",
    "QueueState",
    "Operation",
    "Plan",
    "QueueCore",
    "Query",
    "Rows",
    "Step",
    "WorkerClaim",
    "drive",
    "needs_transaction",
]

T = TypeVar("T")


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
        # A worker's turns (`Turns.turn`, `Turns.settle`), and what the last
        # one saw of the table.
        self.turns = Turns(self.sql)

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

    def enqueue(self, spec: JobSpec) -> Operation[int]:
        """One job, its options checked first (`validate_spec`)."""
        checked = validate_spec(spec)
        return enqueue.enqueue_one(
            self.sql.enqueues, self.sql.limits, self.schema, checked, self.sql.dependencies
        )

    def enqueue_many(self, specs: Iterable[SpecLike]) -> Operation[list[int]]:
        return enqueue.enqueue_many(
            self.sql.enqueues, self.sql.limits, self.schema, specs, self.sql.dependencies
        )

    def chain(self, specs: tuple[SpecLike, ...]) -> Operation[list[int]]:
        """Jobs that run one after the other (docs/workflows.md)."""
        return workflows.chain(
            self.sql.enqueues, self.sql.limits, self.schema, self.sql.dependencies, specs
        )

    def group(self, specs: tuple[SpecLike, ...], then: SpecLike | None) -> Operation[Group]:
        """Jobs that run side by side, and one that runs after all of them."""
        return workflows.group(
            self.sql.enqueues, self.sql.limits, self.schema, self.sql.dependencies, specs, then
        )

    def dependents(self, job_id: int) -> Operation[list[int]]:
        """The jobs that wait for this one (for operators)."""
        return depends.dependents(self.sql.dependencies, job_id)

    # -- claim and outcomes ---------------------------------------------

    def claim(
        self,
        limit: int = 20,
        *,
        worker: str,
        kinds: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
    ) -> Operation[list[Job]]:
        params = claim_plans.claim_params(limit, worker, kinds, queues)
        statement = self.sql.claim_for("queues" in params, "kinds" in params, params.pop("limit"))
        return claim_plans.claim_jobs(statement, params)

    def claim_orphan(
        self,
        *,
        worker: str,
        kinds: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
    ) -> Operation[list[Job]]:
        """Claim one orphaned job (`Job.orphaned`), for a worker to run alone."""
        params = claim_plans.claim_params(1, worker, kinds, queues)
        orphan = self.sql.claims.orphan_claims["queues" in params, "kinds" in params]
        return claim_plans.claim_jobs(orphan, params)

    def complete(
        self, jobs_or_ids: Iterable[Job | int], results: Mapping[int, str] | None = None
    ) -> Operation[list[int]]:
        return outcomes.complete(self.sql.outcomes, jobs_or_ids, results)

    def failure(
        self, job: Job, error: object, *, retry_in: timedelta | None = None, event: Event
    ) -> Failure:
        """Decide what a failed, expired or released job becomes."""
        return outcomes.decide(job, error, retry_in=retry_in, event=event, backoff=self.backoff)

    def record_failures(self, failures: Sequence[Failure]) -> Operation[dict[int, JobStatus]]:
        return outcomes.record_failures(self.sql.outcomes, failures)

    def written_status(self, failure: Failure, written: dict[int, JobStatus]) -> JobStatus:
        """The status a recorded failure left, or `JobNotRunning` if nothing was written."""
        return outcomes.written_status(failure, written)

    def reap(self, visibility_timeout: timedelta) -> Operation[list[int]]:
        outcomes = self.reap_outcomes(visibility_timeout)

        def plan() -> Plan[list[int]]:
            written = yield from outcomes.plan
            return [job_id for job_id, status in written.items() if status is JobStatus.PENDING]

        return Operation(plan(), atomic=True)

    def reap_outcomes(self, visibility_timeout: timedelta) -> Operation[dict[int, JobStatus]]:
        """`reap`, telling what each expired job became: ``pending``, or ``dead``
        when its lease expired on its last attempt (a worker reports both)."""
        return maintenance.reap_outcomes(
            self.sql.maintenance, self.sql.outcomes, self.table, visibility_timeout
        )

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
        return outcomes.cancel(self.sql.outcomes, self.sql.control_channel, job_ids)

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
        return claim_plans.explain(self.sql.explain_claim)

    def prune_history(self, older_than: timedelta) -> Operation[int]:
        return maintenance.prune_history(self.sql.maintenance, older_than)

    # -- for operators -----------------------------------------------------

    def jobs(self, **page: Unpack[operators.JobPage]) -> Operation[list[Job]]:
        """A page of jobs in id order; `after_id` continues after the last one seen."""
        return operators.jobs(self.sql.operators, **page)

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
