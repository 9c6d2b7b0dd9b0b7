"""A hypothesis state machine that drives a real queue and checks it against a model.

Random enqueues, claims, completions, failures, lease expiries and retries
run through the sync `pgqueue.Queue` on a real PostgreSQL. Beside it runs a
pure Python model that asks `pgqueue.core.states.next_state` what each event
does; after every step every row of the table must match the model.

Failed jobs are either ready at once (a zero backoff, or ``retry_in=0``) or
an hour away, and delayed enqueues are an hour away, so whether a pending
job is ready is known exactly and claims are predictable in number.

Jobs go to a few queues with a few priorities (ties included). A claim must
take, of the ready jobs of the kinds and queues it asks for, the highest
priorities first, then the earliest ``run_at``, then the lowest id: the
model knows which jobs are ready and their priorities, and reads ``run_at``
(the database's clock) to break ties.

Some jobs carry a unique key from a small set, in a scope (``queued``,
``active``) or a window (``unique_for``, whose end the machine brings about by
moving the lease's ``expires_at`` back), with each ``on_duplicate``. The model
knows which job holds each key in each scope and which job leases each
window; an enqueue must return that holder (or raise `DuplicateJob` naming
it, or give it the new payload), and an operator's retry revives a dead
job only where the key's rule allows. After every step the table's holders
and leases must be the model's.

Jobs are cancelled from every state: a pending or dead one is gone at once;
a running one is asked to stop (its heartbeat says so), and whatever its
worker or the reaper then records deletes it, unless its worker reports a
success first. Some jobs keep their outcome (``result_ttl``): the model
knows each kept result (succeeded with its value, dead, cancelled), and
after every step the results table must be the model's; ``result()`` of any
job the machine has seen must say what the model says.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from psycopg import sql

import pgqueue
from pgqueue import Backoff, DuplicateJob, Job, JobNotRunning, JobSpec, JobStatus
from pgqueue.core.ops import Heartbeat
from pgqueue.core.sql import UNIQUE_PREDICATES
from pgqueue.core.states import DELETED, Event, State, next_state

KINDS = ("email", "resize", "report")
QUEUES = ("default", "urgent", "bulk")
LATER = timedelta(hours=1)
LEASE = timedelta(minutes=5)
WINDOW = timedelta(hours=1)
KEEP = timedelta(hours=1)  # result_ttl: long enough that no result expires in a run
KEYS = ("a", "b", "c")
# unique="queued" / "active", or a window (unique_for): where a key is held.
SCOPES = ("queued", "active", "window")

kinds_st = st.sampled_from(KINDS)
queues_st = st.sampled_from(QUEUES)
# Few values, so that ties (broken by run_at, id) are common.
priorities_st = st.sampled_from((-100, -1, 0, 0, 0, 7, 100))
max_attempts_st = st.integers(min_value=1, max_value=3)


@dataclass(frozen=True)
class Uniqueness:
    key: str
    scope: str  # "queued", "active" or "window"
    on_duplicate: str


uniqueness_st = st.none() | st.builds(
    Uniqueness,
    st.sampled_from(KEYS),
    st.sampled_from(SCOPES),
    st.sampled_from(("return", "raise", "replace")),
)


@dataclass(frozen=True)
class ModelJob:
    status: State
    attempts: int
    max_attempts: int
    kind: str
    payload: int
    ready: bool  # run_at <= now(): a pending job a claim may take
    queue: str = "default"
    priority: int = 0
    key: str | None = None
    scope: str | None = None
    keeps: bool = False  # enqueued with result_ttl
    cancel_requested: bool = False

    def holds(self, key: str, scope: str) -> bool:
        """Whether this job holds ``key`` in ``scope`` (the unique indexes' predicates)."""
        if (self.key, self.scope) != (key, scope):
            return False
        if scope == "queued":
            return self.status is JobStatus.PENDING and self.attempts == 0
        return scope == "active" and self.status in (JobStatus.PENDING, JobStatus.RUNNING)


@dataclass(frozen=True)
class Lease:
    """A unique_for window: the job it was taken for, and whether it ran out."""

    job_id: int
    over: bool = False  # expires_at <= now()
    stale: bool = False  # so long over that the reaper prunes it


@dataclass(frozen=True)
class EnqueueSpec:
    """One job to enqueue, as the machine draws it."""

    kind: str
    max_attempts: int = 3
    delayed: bool = False
    queue: str = "default"
    priority: int = 0
    unique: Uniqueness | None = None
    keeps: bool = False

    def options(self) -> dict[str, Any]:
        """The keyword arguments of `enqueue` (and fields of `JobSpec`) besides kind and payload."""
        options: dict[str, Any] = {
            "max_attempts": self.max_attempts,
            "delay": LATER if self.delayed else None,
            "queue": self.queue,
            "priority": self.priority,
            "result_ttl": KEEP if self.keeps else None,
        }
        u = self.unique
        if u is not None:
            options.update(unique_key=u.key, on_duplicate=u.on_duplicate)
            if u.scope == "window":
                options["unique_for"] = WINDOW
            else:
                options["unique"] = u.scope
        return options


specs_st = st.builds(
    EnqueueSpec,
    kinds_st,
    max_attempts_st,
    st.booleans(),
    queues_st,
    priorities_st,
    uniqueness_st,
    st.booleans(),
)


class QueueMachine(RuleBasedStateMachine):
    def __init__(self, queue: pgqueue.Queue, raw: psycopg.Connection[Any]) -> None:
        super().__init__()
        self.queue = queue
        self.raw = raw
        self.table = sql.Identifier(queue.table)
        self.leases_table = sql.Identifier(f"{queue.table}_unique_leases")
        self.results_table = sql.Identifier(f"{queue.table}_results")
        # Every example starts from an empty table.
        self.query("TRUNCATE {table}, {leases}, {results}")
        self.model: dict[int, ModelJob] = {}
        # unique_for windows by key.
        self.leases: dict[str, Lease] = {}
        # The Job each running row was claimed as: what its worker would pass to fail().
        self.claims: dict[int, Job] = {}
        # Claims whose lease expired: their worker may still report, too late.
        self.stale: list[Job] = []
        self.payloads = iter(range(1_000_000))
        # Kept results by job id: (outcome, value), as the results table holds them.
        self.results: dict[int, tuple[str, Any]] = {}
        # Jobs that left the table keeping nothing: result() says None.
        self.gone: set[int] = set()

    # -- helpers ---------------------------------------------------------------

    def query(self, text: str, *params: Any) -> list[tuple[Any, ...]]:
        composed = sql.SQL(text).format(
            table=self.table, leases=self.leases_table, results=self.results_table
        )
        cur = self.raw.execute(composed, params or None)
        return cur.fetchall() if cur.description else []

    def ids(self, status: JobStatus) -> list[int]:
        return sorted(i for i, j in self.model.items() if j.status is status)

    def transition(self, job_id: int, event: Event, **changes: Any) -> State:
        """Move the model's job by `event`, as the state machine says; return its new state."""
        job = self.model[job_id]
        attempts = job.attempts + 1 if event is Event.CLAIM else job.attempts
        new = next_state(job.status, event, attempts=attempts, max_attempts=job.max_attempts)
        if new is DELETED or new is JobStatus.CANCELLED:
            del self.model[job_id]
            self.claims.pop(job_id, None)
            if not job.keeps:
                self.gone.add(job_id)
            elif new is JobStatus.CANCELLED:
                self.results[job_id] = ("cancelled", None)
            else:
                self.results[job_id] = ("succeeded", changes.get("value"))
        else:
            changes.pop("value", None)
            self.model[job_id] = replace(job, **{"status": new, "attempts": attempts, **changes})
            if new is JobStatus.DEAD and job.keeps:
                self.results[job_id] = ("dead", None)
        return new

    def outcome_of(self, job_id: int, event: Event, **changes: Any) -> State:
        """`transition` for a recorded failure or expiry: a job whose cancel
        was requested is cancelled instead, whatever the event would do."""
        if self.model[job_id].cancel_requested:
            return self.transition(job_id, Event.CANCEL)
        return self.transition(job_id, event, **changes)

    def holder(self, key: str, scope: str) -> int | None:
        """The job that holds ``key`` in ``scope`` now, by the model; None if it is free."""
        if scope == "window":
            lease = self.leases.get(key)
            return None if lease is None or lease.over else lease.job_id
        held = [i for i, j in self.model.items() if j.holds(key, scope)]
        assert len(held) <= 1
        return held[0] if held else None

    # -- enqueue ---------------------------------------------------------------

    def expect_enqueue(self, spec: EnqueueSpec, payload: int) -> int | None:
        """Apply an enqueue to the model: the id it must return, or None for
        a new job (whose id only the queue knows). Raises `DuplicateJob` as the
        queue must, changing nothing."""
        u = spec.unique
        if u is None:
            return None
        existing = self.holder(u.key, u.scope)
        if existing is None:
            return None
        if u.on_duplicate == "raise":
            raise DuplicateJob(u.key, existing)
        held = self.model.get(existing)  # a window's job may be gone
        if u.on_duplicate == "replace" and held and held.status is JobStatus.PENDING:
            self.model[existing] = replace(held, payload=payload, ready=not spec.delayed)
        return existing

    def add(self, job_id: int, spec: EnqueueSpec, payload: int) -> None:
        assert job_id not in self.model
        u = spec.unique
        self.model[job_id] = ModelJob(
            JobStatus.PENDING, 0, spec.max_attempts, spec.kind, payload, not spec.delayed,
            spec.queue, spec.priority, None if u is None else u.key, None if u is None else u.scope,
            spec.keeps,
        )  # fmt: skip
        if u is not None and u.scope == "window":
            self.leases[u.key] = Lease(job_id)

    def enqueue_in_model(self, spec: EnqueueSpec, payload: int, got: int) -> None:
        """Check what an enqueue returned against the model, and apply it."""
        expected = self.expect_enqueue(spec, payload)
        if expected is None:
            self.add(got, spec, payload)
        else:
            assert got == expected, (spec, got, expected)

    @rule(spec=specs_st)
    def enqueue(self, spec: EnqueueSpec) -> None:
        payload = next(self.payloads)
        u = spec.unique
        try:
            job_id = self.queue.enqueue(spec.kind, {"n": payload}, **spec.options())
        except DuplicateJob as dup:
            assert u is not None and u.on_duplicate == "raise"
            assert dup.existing_id == self.holder(u.key, u.scope)
            return
        self.enqueue_in_model(spec, payload, job_id)

    @rule(specs=st.lists(specs_st, max_size=5), as_tuples=st.booleans())
    def enqueue_many(self, specs: list[EnqueueSpec], as_tuples: bool) -> None:
        payloads = [next(self.payloads) for _ in specs]
        if as_tuples:
            # A (kind, payload) tuple takes the defaults: ready now, 3 attempts.
            specs = [EnqueueSpec(s.kind) for s in specs]
            ids = self.queue.enqueue_many(
                [(s.kind, {"n": p}) for s, p in zip(specs, payloads, strict=True)]
            )
        else:
            expected_raise = self.first_raise(specs, payloads)
            try:
                ids = self.queue.enqueue_many(
                    [
                        JobSpec(s.kind, {"n": p}, **s.options())
                        for s, p in zip(specs, payloads, strict=True)
                    ]
                )
            except DuplicateJob as dup:
                assert expected_raise is not None
                if expected_raise.existing_id < 0:
                    # A job of this very batch, rolled back with it.
                    assert dup.existing_id not in self.model
                else:
                    assert dup.existing_id == expected_raise.existing_id
                return
            assert expected_raise is None
        assert len(ids) == len(specs)
        for job_id, spec, payload in zip(ids, specs, payloads, strict=True):
            self.enqueue_in_model(spec, payload, job_id)

    def first_raise(self, specs: list[EnqueueSpec], payloads: list[int]) -> DuplicateJob | None:
        """The `DuplicateJob` a batch must raise, if any: the batch is one
        transaction, and its unique jobs are written in the order of their
        keys (then scopes; a key's jobs in the batch's order), so it raises
        for the first key in that order that has a raising duplicate. The
        model is left as it was: a raising batch writes nothing."""
        before = (dict(self.model), dict(self.leases))
        raised: dict[tuple[str, str], DuplicateJob] = {}
        for spec, payload in zip(specs, payloads, strict=True):
            u = spec.unique
            if u is not None and (u.key, u.scope) in raised:
                continue  # the queue stops there; other keys are independent
            try:
                if self.expect_enqueue(spec, payload) is None:
                    # New jobs get stand-in ids; the batch's duplicates see them.
                    self.add(-next(self.payloads), spec, payload)
            except DuplicateJob as dup:
                assert u is not None
                raised[u.key, u.scope] = dup
        self.model, self.leases = before
        return raised[min(raised)] if raised else None

    @precondition(lambda self: any(not lease.over for lease in self.leases.values()))
    @rule(data=st.data(), stale=st.booleans())
    def window_runs_out(self, data: st.DataObject, stale: bool) -> None:
        key = data.draw(st.sampled_from(sorted(k for k, v in self.leases.items() if not v.over)))
        # Just over, or over long enough for the reaper to prune it.
        self.query(
            "UPDATE {leases} SET expires_at = now() - %s::interval WHERE unique_key = %s",
            timedelta(hours=1) if stale else timedelta(microseconds=1),
            key,
        )
        self.leases[key] = replace(self.leases[key], over=True, stale=stale)

    def reaped(self) -> None:
        """The reaper ran: it pruned the leases long over."""
        self.leases = {k: v for k, v in self.leases.items() if not v.stale}

    # -- claim -----------------------------------------------------------------

    @rule(
        limit=st.integers(min_value=1, max_value=5),
        kinds=st.none() | st.lists(kinds_st, min_size=1, max_size=3, unique=True),
        queues=st.none() | st.lists(queues_st, min_size=1, max_size=3, unique=True),
    )
    def claim(self, limit: int, kinds: list[str] | None, queues: list[str] | None) -> None:
        wanted = set(KINDS if kinds is None else kinds)
        served = set(QUEUES if queues is None else queues)
        claimable = {
            i
            for i, j in self.model.items()
            if j.status is JobStatus.PENDING and j.ready and j.kind in wanted and j.queue in served
        }
        # The highest priorities first, then run_at (the database's), then id.
        run_at = dict(self.query("SELECT id, run_at FROM {table} WHERE id = ANY(%s)", [*claimable]))
        first = sorted(claimable, key=lambda i: (-self.model[i].priority, run_at[i], i))[:limit]
        # Every claim by a worker of its own, as after a crash and a restart.
        self.claim_count = getattr(self, "claim_count", 0) + 1
        worker = f"machine-{self.claim_count}"
        jobs = self.queue.claim(limit, worker=worker, kinds=kinds, queues=queues)
        # Nobody else claims, so SKIP LOCKED skips nothing: exactly the first ones.
        assert [j.id for j in jobs] == first
        for job in jobs:
            assert job.id in claimable, f"claimed job {job.id} was not pending, ready and wanted"
            before = self.model[job.id]
            assert self.transition(job.id, Event.CLAIM) is JobStatus.RUNNING
            after = self.model[job.id]
            assert job.status is JobStatus.RUNNING
            assert job.attempts == after.attempts == before.attempts + 1
            assert (job.kind, job.payload, job.max_attempts) == (
                before.kind,
                {"n": before.payload},
                before.max_attempts,
            )
            assert job.locked_by == worker
            assert job.locked_at is not None
            assert (job.queue, job.priority, job.unique_key) == (
                before.queue,
                before.priority,
                before.key,
            )
            self.claims[job.id] = job

    # -- outcomes --------------------------------------------------------------

    @precondition(lambda self: self.ids(JobStatus.RUNNING))
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        running = self.ids(JobStatus.RUNNING)
        chosen = data.draw(st.lists(st.sampled_from(running), min_size=1, unique=True))
        as_jobs = data.draw(st.booleans())
        args: list[Job | int] = [self.claims[i] if as_jobs else i for i in chosen]
        assert self.queue.complete(*args) == len(chosen)
        for job_id in chosen:
            # A handler that finished before it heard of its cancel succeeded.
            assert self.transition(job_id, Event.SUCCEED) is DELETED

    @precondition(lambda self: self.ids(JobStatus.RUNNING))
    @rule(data=st.data())
    def settle_with_return_values(self, data: st.DataObject) -> None:
        # One worker's successes, each with its handler's return value.
        worker = self.claims[data.draw(st.sampled_from(self.ids(JobStatus.RUNNING)))].locked_by
        mine = [i for i, job in self.claims.items() if job.locked_by == worker]
        chosen = data.draw(st.lists(st.sampled_from(mine), min_size=1, unique=True))
        values = {i: {"returned": self.model[i].payload} for i in chosen}
        results = {i: json.dumps(v) for i, v in values.items()}
        assert worker is not None
        done, failed = self.queue._settle(chosen, [], worker=worker, results=results)
        assert (sorted(done), failed) == (sorted(chosen), {})
        for job_id in chosen:
            assert self.transition(job_id, Event.SUCCEED, value=values[job_id]) is DELETED

    @precondition(lambda self: self.ids(JobStatus.PENDING) or self.ids(JobStatus.DEAD))
    @rule(data=st.data())
    def complete_of_a_job_that_is_not_running_changes_nothing(self, data: st.DataObject) -> None:
        idle = self.ids(JobStatus.PENDING) + self.ids(JobStatus.DEAD)
        chosen = data.draw(st.lists(st.sampled_from(idle), min_size=1, unique=True))
        assert self.queue.complete(*chosen) == 0

    @precondition(lambda self: self.ids(JobStatus.RUNNING))
    @rule(data=st.data(), retry_in=st.sampled_from([None, timedelta(0), LATER]))
    def fail(self, data: st.DataObject, retry_in: timedelta | None) -> None:
        job_id = data.draw(st.sampled_from(self.ids(JobStatus.RUNNING)))
        status = self.queue.fail(
            self.claims[job_id], ValueError(f"boom {job_id}"), retry_in=retry_in
        )
        # The queue's backoff is zero: without retry_in, a failed job is ready at once.
        expected = self.outcome_of(job_id, Event.FAIL, ready=retry_in != LATER)
        assert status is expected
        self.claims.pop(job_id, None)
        if expected is not JobStatus.CANCELLED:
            last_error = self.query("SELECT last_error FROM {table} WHERE id = %s", job_id)[0][0]
            assert last_error == f"ValueError: boom {job_id}"

    @precondition(lambda self: self.ids(JobStatus.RUNNING))
    @rule(data=st.data())
    def reap_expired_leases(self, data: st.DataObject) -> None:
        running = self.ids(JobStatus.RUNNING)
        expired = data.draw(st.lists(st.sampled_from(running), unique=True))
        # Age the chosen leases past the visibility timeout; the rest stay fresh.
        self.query(
            "UPDATE {table} SET locked_at = now() - %s::interval WHERE id = ANY(%s::bigint[])",
            2 * LEASE,
            expired,
        )
        returned = self.queue.reap(LEASE)
        self.reaped()
        expected = set()
        for job_id in expired:
            claim = self.claims.pop(job_id)
            if self.outcome_of(job_id, Event.EXPIRE, ready=True) is JobStatus.PENDING:
                expected.add(job_id)
            self.stale.append(claim)
        assert len(returned) == len(set(returned))
        assert set(returned) == expected
        for job_id in expired:
            if job_id not in self.model:
                continue  # cancelled
            status = self.model[job_id].status
            if status is not JobStatus.RUNNING:
                error = self.query("SELECT last_error FROM {table} WHERE id = %s", job_id)[0][0]
                assert error.startswith("lease expired")

    def fenced_stale_claims(self) -> list[Job]:
        """Stale claims whose late report the fence must refuse: every one whose
        row is no longer running under that very claim (same attempts, same
        worker). A retried job's attempts restart at 0, so a newer claim can
        carry a stale claim's count; the worker's name tells them apart."""
        fenced = []
        for job in self.stale:
            now = self.model.get(job.id)
            current = self.claims.get(job.id)
            if (
                now is None
                or now.status is not JobStatus.RUNNING
                or current is None
                or (current.attempts, current.locked_by) != (job.attempts, job.locked_by)
            ):
                fenced.append(job)
        return fenced

    @precondition(lambda self: self.fenced_stale_claims())
    @rule(data=st.data(), retry_in=st.sampled_from([None, timedelta(0)]))
    def late_failure_of_an_expired_claim_is_refused(
        self, data: st.DataObject, retry_in: timedelta | None
    ) -> None:
        job = data.draw(st.sampled_from(self.fenced_stale_claims()))
        with pytest.raises(JobNotRunning):
            self.queue.fail(job, "too late", retry_in=retry_in)

    @precondition(lambda self: self.ids(JobStatus.RUNNING))
    @rule()
    def reap_leaves_fresh_leases_alone(self) -> None:
        assert self.queue.reap(LEASE) == []
        self.reaped()

    # -- job control -------------------------------------------------------------

    @rule(data=st.data(), unknown=st.booleans())
    def cancel(self, data: st.DataObject, unknown: bool) -> None:
        known = sorted(self.model) + sorted(self.gone | set(self.results))
        chosen = data.draw(st.lists(st.sampled_from(known), unique=True)) if known else []
        if unknown:
            chosen.append(1_000_000_000)
        deleted, requested = [], []
        for job_id in sorted(chosen):
            job = self.model.get(job_id)
            if job is None:
                continue
            if job.status is JobStatus.RUNNING:
                requested.append(job_id)
                self.model[job_id] = replace(job, cancel_requested=True)
            else:
                deleted.append(job_id)
                assert self.transition(job_id, Event.CANCEL) is JobStatus.CANCELLED
        got = self.queue.cancel(*chosen)
        found = set(deleted) | set(requested)
        not_found = sorted(i for i in set(chosen) if i not in found)
        assert got == pgqueue.Cancelled(deleted, requested, not_found)

    @precondition(lambda self: self.ids(JobStatus.RUNNING))
    @rule(data=st.data())
    def cancel_a_running_job(self, data: st.DataObject) -> None:
        # Often enough that its worker's outcome, or the reaper, comes after.
        job_id = data.draw(st.sampled_from(self.ids(JobStatus.RUNNING)))
        assert self.queue.cancel(job_id) == pgqueue.Cancelled([], [job_id], [])
        self.model[job_id] = replace(self.model[job_id], cancel_requested=True)

    @precondition(lambda self: self.ids(JobStatus.RUNNING))
    @rule(data=st.data())
    def heartbeat_tells_of_cancels(self, data: st.DataObject) -> None:
        worker = self.claims[data.draw(st.sampled_from(self.ids(JobStatus.RUNNING)))].locked_by
        assert worker is not None
        mine = sorted(i for i, job in self.claims.items() if job.locked_by == worker)
        beat = self.queue._heartbeat(mine, worker=worker)
        asked = [i for i in mine if self.model[i].cancel_requested]
        assert (sorted(beat.held), sorted(beat.cancel)) == (mine, asked)
        assert isinstance(beat, Heartbeat)

    @precondition(lambda self: self.model or self.gone or self.results)
    @rule(data=st.data())
    def result_says_what_the_model_says(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(set(self.model) | self.gone | set(self.results))))
        result = self.queue.result(job_id)
        job = self.model.get(job_id)
        if job is not None:
            assert result is not None and result.outcome == job.status.value
            if job.status is JobStatus.DEAD:
                assert result.error is not None
        elif job_id in self.results:
            assert result is not None
            assert (result.outcome, result.value) == self.results[job_id]
        else:
            assert result is None

    # -- operator ----------------------------------------------------------------

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        chosen = data.draw(st.lists(st.sampled_from(sorted(self.model)), unique=True))
        revived = self.revivable(set(chosen) & set(self.ids(JobStatus.DEAD)))
        assert self.queue.retry(chosen) == len(revived)
        for job_id in revived:
            assert self.transition(job_id, Event.RETRY, attempts=0, ready=True) is (
                JobStatus.PENDING
            )

    def revivable(self, dead: set[int]) -> set[int]:
        """Which of these dead jobs a retry revives: not one whose key another
        job holds now in its scope, and of several with one key (and scope), the
        newest only; every job without a key. A window does not stop a retry."""
        newest: dict[tuple[str, str], int] = {}
        revived = set()
        for job_id in sorted(dead):
            job = self.model[job_id]
            if job.key is None or job.scope is None:
                revived.add(job_id)
            elif job.scope == "window" or self.holder(job.key, job.scope) is None:
                newest[job.key, job.scope] = job_id
        return revived | set(newest.values())

    # -- the check ---------------------------------------------------------------

    @invariant()
    def every_row_matches_the_model(self) -> None:
        rows = self.query(
            """
SELECT id, status, attempts, max_attempts, kind, payload, run_at <= now(),
       locked_at IS NOT NULL, locked_by IS NOT NULL, queue, priority, unique_key, unique_scope,
       result_ttl IS NOT NULL, cancel_requested_at IS NOT NULL
  FROM {table}"""
        )
        in_table = {row[0]: row[1:] for row in rows}
        # Succeeded jobs are gone, and nothing else is.
        assert set(in_table) == set(self.model)
        for job_id, job in self.model.items():
            (status, attempts, max_attempts, kind, payload, ready, locked, owned,
             queue, priority, key, scope, keeps, cancel_requested) = in_table[job_id]  # fmt: skip
            assert JobStatus(status) is job.status, job_id
            assert (attempts, max_attempts, kind, payload) == (
                job.attempts,
                job.max_attempts,
                job.kind,
                {"n": job.payload},
            ), job_id
            assert (queue, priority, key, scope) == (job.queue, job.priority, job.key, job.scope)
            assert (keeps, cancel_requested) == (job.keeps, job.cancel_requested), job_id
            running = job.status is JobStatus.RUNNING
            assert locked is owned is running, job_id
            if job.status is JobStatus.PENDING:
                assert ready is job.ready, job_id
            # Only a dead job has used every attempt; a live one has one left or in hand.
            assert 0 <= job.attempts <= job.max_attempts
            if job.status is JobStatus.PENDING:
                assert job.attempts < job.max_attempts
            if job.status is JobStatus.DEAD:
                assert job.attempts == job.max_attempts
        assert set(self.claims) == set(self.ids(JobStatus.RUNNING))

    @invariant()
    def the_kept_results_are_the_models(self) -> None:
        rows = self.query("SELECT job_id, outcome, value FROM {results}")
        assert {i: (outcome, value) for i, outcome, value in rows} == self.results

    @invariant()
    def every_key_has_the_models_holder_and_no_other(self) -> None:
        for scope, predicate in UNIQUE_PREDICATES.items():
            rows = self.query(f"SELECT unique_key, id FROM {{table}} WHERE {predicate}")
            held: dict[str, list[int]] = {}
            for key, job_id in rows:
                held.setdefault(key, []).append(job_id)
            assert all(len(ids) == 1 for ids in held.values()), (scope, held)
            assert {k: ids[0] for k, ids in held.items()} == {
                k: h for k in KEYS if (h := self.holder(k, scope)) is not None
            }, scope
        leases = self.query(
            "SELECT unique_key, job_id, expires_at <= now(),"
            " expires_at < now() - interval '1 minute' FROM {leases}"
        )
        assert {k: Lease(i, over, stale) for k, i, over, stale in leases} == self.leases


@pytest.fixture
def machine_queue(dsn: str, table: str) -> Iterator[pgqueue.Queue]:
    # A zero backoff: a job that fails below max_attempts is ready again at once.
    with pgqueue.Queue(dsn, table=table, backoff=Backoff(base=timedelta(0), jitter=0)) as q:
        q.install()
        yield q


def test_queue_matches_the_state_machine_model_under_random_operations(
    machine_queue: pgqueue.Queue, dsn: str
) -> None:
    with psycopg.connect(dsn, autocommit=True) as raw:
        run_state_machine_as_test(
            # A factory works as well as a class; hypothesis's stub only names the class.
            lambda: QueueMachine(machine_queue, raw),  # type: ignore[arg-type]
            settings=settings(
                max_examples=60,
                stateful_step_count=50,
                deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture],
            ),
        )
