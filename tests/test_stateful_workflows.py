"""A hypothesis state machine for workflows: random graphs, random outcomes.

Random jobs are enqueued with ``depends_on`` on random jobs the machine has
seen (pending, running, waiting, dead, succeeded, cancelled), and random
outcomes follow: claims, successes, failures (retried, or dead at the last
attempt), lease expiries, cancels. A pure model says what each job must be
from its parents' fates alone: waiting while one of them is not over;
pending once all of them succeeded; cancelled, with its row gone, once one
of them (or one above them) died or was cancelled. After every step every
job the machine has seen must be what the model says, in the table and in
the results table (every job keeps its result, so that a cancelled or dead
dependency is known and refused).
"""

from __future__ import annotations

from collections.abc import Iterator
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
from pgqueue import Backoff, Job

KEEP = timedelta(hours=1)
TINY = timedelta(microseconds=1)
# A job's fate in the model: its row's status, or how it left the table.
LIVE = ("pending", "running", "waiting", "dead")
OVER = ("succeeded", "cancelled")


class WorkflowMachine(RuleBasedStateMachine):
    def __init__(self, queue: pgqueue.Queue, raw: psycopg.Connection[Any]) -> None:
        super().__init__()
        self.queue = queue
        self.raw = raw
        self.names = {
            "table": sql.Identifier(queue.table),
            "results": sql.Identifier(f"{queue.table}_results"),
            "deps": sql.Identifier(f"{queue.table}_dependencies"),
        }
        self.query("TRUNCATE {table}, {results}, {deps}")
        self.state: dict[int, str] = {}
        self.parents: dict[int, set[int]] = {}
        self.claims: dict[int, Job] = {}

    def query(self, text: str, *params: Any) -> list[tuple[Any, ...]]:
        cur = self.raw.execute(sql.SQL(text).format(**self.names), params or None)
        return cur.fetchall() if cur.description else []

    def ids(self, *states: str) -> list[int]:
        return sorted(i for i, s in self.state.items() if s in states)

    # -- the model ------------------------------------------------------------------

    def settle(self) -> None:
        """What follows from the parents' fates, to a fixed point."""
        changed = True
        while changed:
            changed = False
            for job_id in self.ids("waiting"):
                fates = {self.state[p] for p in self.parents[job_id]}
                if fates & {"dead", "cancelled"}:
                    self.state[job_id] = "cancelled"
                    changed = True
                elif fates <= {"succeeded"}:
                    self.state[job_id] = "pending"
                    changed = True

    def cancelled_below(self, job_id: int) -> None:
        """A job that died or was cancelled: every waiting job below it goes."""
        below = [c for c, ps in self.parents.items() if job_id in ps]
        for child in below:
            if self.state[child] == "waiting":
                self.state[child] = "cancelled"
                self.cancelled_below(child)

    # -- rules ------------------------------------------------------------------------

    @rule(data=st.data(), max_attempts=st.sampled_from([1, 2]))
    def enqueue(self, data: st.DataObject, max_attempts: int) -> None:
        known = sorted(self.state)
        parents = data.draw(st.lists(st.sampled_from(known), max_size=3)) if known else []
        refused = any(self.state[p] in ("dead", "cancelled") for p in parents)
        if refused:
            with pytest.raises(ValueError):
                self.queue.enqueue("k", depends_on=parents, result_ttl=KEEP)
            return
        job_id = self.queue.enqueue(
            "k", depends_on=parents or None, max_attempts=max_attempts, result_ttl=KEEP
        )
        self.parents[job_id] = set(parents)
        waiting = any(self.state[p] in ("pending", "running", "waiting") for p in parents)
        self.state[job_id] = "waiting" if waiting else "pending"

    @precondition(lambda self: self.ids("pending"))
    @rule()
    def claim(self) -> None:
        jobs = self.queue.claim(1, worker="w")
        assert len(jobs) == 1 and jobs[0].id in self.ids("pending")
        self.state[jobs[0].id] = "running"
        self.claims[jobs[0].id] = jobs[0]

    @precondition(lambda self: self.ids("running"))
    @rule(data=st.data())
    def succeed(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(self.ids("running")))
        assert self.queue.complete(job_id) == 1
        del self.claims[job_id]
        self.state[job_id] = "succeeded"
        self.settle()

    @precondition(lambda self: self.ids("running"))
    @rule(data=st.data(), expire=st.booleans())
    def fail(self, data: st.DataObject, expire: bool) -> None:
        job_id = data.draw(st.sampled_from(self.ids("running")))
        job = self.claims.pop(job_id)
        if expire:
            self.queue.reap(TINY)  # every running job's lease
            expired = list(self.claims)
            for other in expired:
                self.fail_in_model(self.claims.pop(other))
        else:
            self.queue.fail(job, "boom", retry_in=timedelta(0))
        self.fail_in_model(job)

    def fail_in_model(self, job: Job) -> None:
        if job.attempts < job.max_attempts:
            self.state[job.id] = "pending"
        else:
            self.state[job.id] = "dead"
            self.cancelled_below(job.id)

    @precondition(lambda self: self.ids("pending", "waiting", "dead"))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(self.ids("pending", "waiting", "dead")))
        before = set(self.ids("waiting"))
        done = self.queue.cancel(job_id)
        assert done.deleted == [job_id]
        self.state[job_id] = "cancelled"
        self.cancelled_below(job_id)
        assert done.dependents == len(before - set(self.ids("waiting")) - {job_id})

    # -- invariants -------------------------------------------------------------------

    @invariant()
    def every_row_is_what_its_parents_fates_say(self) -> None:
        rows = dict(self.query("SELECT id, status FROM {table}"))
        assert rows == {i: s for i, s in self.state.items() if s in LIVE}

    @invariant()
    def every_job_that_left_kept_its_outcome(self) -> None:
        kept = dict(self.query("SELECT job_id, outcome FROM {results}"))
        over = {i: s for i, s in self.state.items() if s in OVER}
        assert {i: kept.get(i) for i in over} == over

    @invariant()
    def a_waiting_job_waits_for_as_many_jobs_as_are_not_over(self) -> None:
        for job_id, waiting_on in self.query(
            "SELECT id, waiting_on FROM {table} WHERE status = 'waiting'"
        ):
            live = [p for p in self.parents[job_id] if self.state[p] in LIVE]
            assert waiting_on == len(live)


@pytest.fixture
def workflow_queue(dsn: str, table: str) -> Iterator[pgqueue.Queue]:
    with pgqueue.Queue(dsn, table=table, backoff=Backoff(base=timedelta(0), jitter=0)) as q:
        q.install()
        yield q


def test_every_jobs_fate_follows_from_its_parents_under_random_graphs_and_outcomes(
    workflow_queue: pgqueue.Queue, dsn: str
) -> None:
    with psycopg.connect(dsn, autocommit=True) as raw:
        run_state_machine_as_test(
            lambda: WorkflowMachine(workflow_queue, raw),  # type: ignore[arg-type]
            settings=settings(
                max_examples=40,
                stateful_step_count=40,
                deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture],
            ),
        )
