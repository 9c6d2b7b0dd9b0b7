"""A hypothesis state machine that drives a real queue and checks it against a model.

Random enqueues, claims, completions, failures, lease expiries and retries
run through the sync `pgqueue.Queue` on a real PostgreSQL. Beside it runs a
pure Python model that asks `pgqueue.core.states.next_state` what each event
does; after every step every row of the table must match the model.

Failed jobs are either ready at once (a zero backoff, or ``retry_in=0``) or
an hour away, and delayed enqueues are an hour away, so whether a pending
job is ready is known exactly and claims are predictable in number. Which
jobs a claim returns is the queue's business (it goes by ``run_at, id``); the
model only checks that each was pending, ready and of a requested kind.
"""

from __future__ import annotations

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
from pgqueue import Backoff, Job, JobNotRunning, JobSpec, JobStatus
from pgqueue.core.states import DELETED, Event, State, next_state

KINDS = ("email", "resize", "report")
LATER = timedelta(hours=1)
LEASE = timedelta(minutes=5)

kinds_st = st.sampled_from(KINDS)
max_attempts_st = st.integers(min_value=1, max_value=3)


@dataclass(frozen=True)
class ModelJob:
    status: State
    attempts: int
    max_attempts: int
    kind: str
    payload: int
    ready: bool  # run_at <= now(): a pending job a claim may take


class QueueMachine(RuleBasedStateMachine):
    def __init__(self, queue: pgqueue.Queue, raw: psycopg.Connection[Any]) -> None:
        super().__init__()
        self.queue = queue
        self.raw = raw
        self.table = sql.Identifier(queue.table)
        # Every example starts from an empty table.
        self.query("TRUNCATE {table}")
        self.model: dict[int, ModelJob] = {}
        # The Job each running row was claimed as: what its worker would pass to fail().
        self.claims: dict[int, Job] = {}
        # Claims whose lease expired: their worker may still report, too late.
        self.stale: list[Job] = []
        self.payloads = iter(range(1_000_000))

    # -- helpers ---------------------------------------------------------------

    def query(self, text: str, *params: Any) -> list[tuple[Any, ...]]:
        cur = self.raw.execute(sql.SQL(text).format(table=self.table), params or None)
        return cur.fetchall() if cur.description else []

    def ids(self, status: JobStatus) -> list[int]:
        return sorted(i for i, j in self.model.items() if j.status is status)

    def transition(self, job_id: int, event: Event, **changes: Any) -> State:
        """Move the model's job by `event`, as the state machine says; return its new state."""
        job = self.model[job_id]
        attempts = job.attempts + 1 if event is Event.CLAIM else job.attempts
        new = next_state(job.status, event, attempts=attempts, max_attempts=job.max_attempts)
        if new is DELETED:
            del self.model[job_id]
        else:
            self.model[job_id] = replace(job, **{"status": new, "attempts": attempts, **changes})
        return new

    def add(self, job_id: int, kind: str, max_attempts: int, payload: int, ready: bool) -> None:
        assert job_id not in self.model
        self.model[job_id] = ModelJob(JobStatus.PENDING, 0, max_attempts, kind, payload, ready)

    # -- enqueue ---------------------------------------------------------------

    @rule(kind=kinds_st, max_attempts=max_attempts_st, delayed=st.booleans())
    def enqueue(self, kind: str, max_attempts: int, delayed: bool) -> None:
        payload = next(self.payloads)
        job_id = self.queue.enqueue(
            kind, {"n": payload}, max_attempts=max_attempts, delay=LATER if delayed else None
        )
        self.add(job_id, kind, max_attempts, payload, ready=not delayed)

    @rule(
        specs=st.lists(st.tuples(kinds_st, max_attempts_st, st.booleans()), max_size=5),
        as_tuples=st.booleans(),
    )
    def enqueue_many(self, specs: list[tuple[str, int, bool]], as_tuples: bool) -> None:
        payloads = [next(self.payloads) for _ in specs]
        if as_tuples:
            # A (kind, payload) tuple takes the defaults: ready now, 3 attempts.
            specs = [(kind, 3, False) for kind, _, _ in specs]
            ids = self.queue.enqueue_many(
                [(k, {"n": p}) for (k, _, _), p in zip(specs, payloads, strict=True)]
            )
        else:
            ids = self.queue.enqueue_many(
                [
                    JobSpec(k, {"n": p}, max_attempts=m, delay=LATER if d else None)
                    for (k, m, d), p in zip(specs, payloads, strict=True)
                ]
            )
        assert len(ids) == len(set(ids)) == len(specs)
        for job_id, (kind, max_attempts, delayed), payload in zip(
            ids, specs, payloads, strict=True
        ):
            self.add(job_id, kind, max_attempts, payload, ready=not delayed)

    # -- claim -----------------------------------------------------------------

    @rule(
        limit=st.integers(min_value=1, max_value=5),
        kinds=st.none() | st.lists(kinds_st, min_size=1, max_size=3, unique=True),
    )
    def claim(self, limit: int, kinds: list[str] | None) -> None:
        wanted = set(KINDS if kinds is None else kinds)
        claimable = {
            i
            for i, j in self.model.items()
            if j.status is JobStatus.PENDING and j.ready and j.kind in wanted
        }
        # Every claim by a worker of its own, as after a crash and a restart.
        self.claim_count = getattr(self, "claim_count", 0) + 1
        worker = f"machine-{self.claim_count}"
        jobs = self.queue.claim(limit, worker=worker, kinds=kinds)
        # Nobody else claims, so SKIP LOCKED skips nothing: as many as asked, if there are.
        assert len(jobs) == min(limit, len(claimable))
        assert len({j.id for j in jobs}) == len(jobs)
        assert [(j.run_at, j.id) for j in jobs] == sorted((j.run_at, j.id) for j in jobs)
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
            assert self.transition(job_id, Event.SUCCEED) is DELETED
            del self.claims[job_id]

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
        expected = self.transition(job_id, Event.FAIL, ready=retry_in != LATER)
        assert status is expected
        del self.claims[job_id]
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
        expected = set()
        for job_id in expired:
            if self.transition(job_id, Event.EXPIRE, ready=True) is JobStatus.PENDING:
                expected.add(job_id)
            self.stale.append(self.claims.pop(job_id))
        assert len(returned) == len(set(returned))
        assert set(returned) == expected
        for job_id in expired:
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

    # -- operator ----------------------------------------------------------------

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        dead = self.ids(JobStatus.DEAD)
        chosen = data.draw(st.lists(st.sampled_from(sorted(self.model)), unique=True))
        assert self.queue.retry(chosen) == len(set(chosen) & set(dead))
        for job_id in chosen:
            if job_id in dead:
                assert self.transition(job_id, Event.RETRY, attempts=0, ready=True) is (
                    JobStatus.PENDING
                )

    # -- the check ---------------------------------------------------------------

    @invariant()
    def every_row_matches_the_model(self) -> None:
        rows = self.query(
            """
SELECT id, status, attempts, max_attempts, kind, payload, run_at <= now(),
       locked_at IS NOT NULL, locked_by IS NOT NULL
  FROM {table}"""
        )
        in_table = {
            job_id: (status, attempts, max_attempts, kind, payload, ready, locked, owned)
            for job_id, status, attempts, max_attempts, kind, payload, ready, locked, owned in rows
        }
        # Succeeded jobs are gone, and nothing else is.
        assert set(in_table) == set(self.model)
        for job_id, job in self.model.items():
            status, attempts, max_attempts, kind, payload, ready, locked, owned = in_table[job_id]
            assert JobStatus(status) is job.status, job_id
            assert (attempts, max_attempts, kind, payload) == (
                job.attempts,
                job.max_attempts,
                job.kind,
                {"n": job.payload},
            ), job_id
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
