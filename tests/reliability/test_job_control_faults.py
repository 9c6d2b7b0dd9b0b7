"""Scenarios 19 to 21: job control (cancel, results, limits) through faults.

Real ``pgqueue worker`` processes (tests/reliability/control_app.py) whose
handlers write each run's start and end in ``<table>_spans``, by the
database's clock, on connections of their own:

19. A limit of 2 over 4 worker processes, one SIGKILLed while it runs a
    limited job: never more than 2 limited handlers at once (from the
    spans) nor 2 limited jobs ``running`` (sampled on the server); every
    job runs to its end, the killed process's through their lease.
20. A cancel sent while the worker's LISTEN connection is silenced, then
    cut (``listen_conninfo`` through a proxy; nothing else goes through
    it), still stops the running job: within one heartbeat while the
    worker cannot tell (the silence), within one of the beats it makes
    every second once it knows it cannot listen (the cut).
21. ``wait()`` in another process, waiting while the job's worker is
    SIGKILLed in its handler, returns the value of the retry that another
    worker ran after the lease.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import make_conninfo

import pgqueue
from pgqueue import JobSpec
from pgqueue.core.sql import Statements

from .conftest import FLAVOURS, PATIENCE, ROOT, Fleet, Report, Worker
from .proxy import Proxy

APP = {
    "sync": ["tests.reliability.control_app:worker"],
    "asyncio": ["tests.reliability.control_app:async_worker"],
    "trio": ["tests.reliability.control_app:async_worker", "--trio"],
}
RESULT_TTL = timedelta(minutes=10)


@pytest.fixture
def spans(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fleet]:
    """The fleet, running control_app.py, with the handlers' spans table."""
    for flavour, target in APP.items():
        monkeypatch.setitem(FLAVOURS, flavour, target)
    fleet.execute(
        f"CREATE TABLE {fleet.table}_spans (id bigserial PRIMARY KEY, job_id bigint NOT NULL,"
        " attempt int NOT NULL, kind text NOT NULL, pid int NOT NULL,"
        " started_at timestamptz NOT NULL DEFAULT clock_timestamp(), ended_at timestamptz,"
        " run_at timestamptz, saw_cancel boolean NOT NULL DEFAULT false)"
    )
    try:
        yield fleet
    finally:
        fleet.execute(f"DROP TABLE IF EXISTS {fleet.table}_spans")


def span_rows(fleet: Fleet, query: str, *params: object) -> list[tuple[Any, ...]]:
    """``fleet.execute``, with ``{spans}`` standing for the handlers' spans table."""
    return fleet.execute(query.replace("{spans}", f"{fleet.table}_spans"), *params)


def db_now(fleet: Fleet) -> datetime:
    now: datetime = fleet.execute("SELECT clock_timestamp()")[0][0]
    return now


def most_at_once(spans: list[tuple[datetime, datetime]]) -> int:
    """The most spans under way at one moment (one that ends as another
    starts, to the microsecond, is not counted with it)."""
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = running = 0
    for _, step in events:  # at a tie, -1 sorts first
        running += step
        most = max(most, running)
    return most


# -- 19. a limit of 2 over 4 processes, one SIGKILLed --------------------------------------

KEY = "scarce"
LIMIT = 2
LIMITED_JOBS = 24
LIMITED_SECONDS = 0.3
GATHER = 3  # unlimited jobs that run together: the spans see overlap when there is some
LIMIT_LEASE = "3"  # seconds: the killed process's jobs and slots come back soon


class Sampler:
    """The server's count of limited jobs ``running`` (their slots taken),
    sampled at every poll of a wait: the most it was."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.most_running = 0
        self.most_taken = 0
        self.samples = 0

    def sample(self) -> None:
        [(running, taken)] = self.fleet.execute(
            "SELECT (SELECT count(*) FROM {table} WHERE limit_key = %s AND status = 'running'),"
            f" (SELECT count(*) FROM {self.fleet.table}_limit_slots"
            "   WHERE limit_key = %s AND job_id IS NOT NULL)",
            KEY,
            KEY,
        )
        self.most_running = max(self.most_running, running)
        self.most_taken = max(self.most_taken, taken)
        self.samples += 1


def open_limited_spans(fleet: Fleet) -> dict[int, set[int]]:
    """The limited jobs whose handler runs now (started, not ended), by process id."""
    rows = span_rows(
        fleet, "SELECT pid, job_id FROM {spans} WHERE kind = 'limited' AND ended_at IS NULL"
    )
    running: dict[int, set[int]] = {}
    for pid, job_id in rows:
        running.setdefault(pid, set()).add(job_id)
    return running


def freeze_one_in_a_limited_handler(
    fleet: Fleet, workers: list[Worker], sampler: Sampler
) -> tuple[Worker, set[int]]:
    """SIGSTOP one of ``workers`` at a moment it runs limited handlers and has
    no statement in flight (its handlers' included), so that what it runs
    cannot change before it is killed. Return it and the jobs of those
    handlers. (A process that holds a slot keeps it while jobs of the key
    wait: its success hands the slot to the next one. So the victim may
    hold one slot or both.)"""
    by_pid = {w.pid: w for w in workers}

    def running() -> list[Worker]:
        """The processes running limited handlers."""
        return [by_pid[pid] for pid in open_limited_spans(fleet) if pid in by_pid]

    def ready() -> bool:
        sampler.sample()
        left = fleet.count("limit_key = %s", KEY)
        assert left, f"the limited jobs ran out before the kill\n{fleet.output()}"
        return bool(running())

    while True:
        fleet.wait_until(ready, "a process in a limited handler", alive=workers)
        candidates = running()
        if not candidates:
            continue
        victim = candidates[0]
        victim.proc.send_signal(signal.SIGSTOP)

        def still(victim: Worker = victim) -> bool:
            return fleet.statements_running(victim) == 0

        fleet.wait_until(still, "the victim's statements to end")
        jobs = open_limited_spans(fleet).get(victim.pid, set())
        if jobs:
            return victim, jobs
        victim.proc.send_signal(signal.SIGCONT)  # they ended meanwhile: another try


def test_a_limit_holds_over_four_processes_and_a_sigkill_and_every_job_runs(
    spans: Fleet, backend: str, report: Report
) -> None:
    fleet = spans
    with pgqueue.Queue(fleet.dsn, table=fleet.table) as q:
        q.set_limit(KEY, LIMIT)
        limited = q.enqueue_many(
            [
                JobSpec("limited", {"seconds": LIMITED_SECONDS, "n": i}, limit_key=KEY)
                for i in range(LIMITED_JOBS)
            ]
        )
        gather = q.enqueue_many([JobSpec("gather", {"together": GATHER}) for _ in range(GATHER)])
    env = {
        "REL_VISIBILITY_TIMEOUT": LIMIT_LEASE,
        "REL_CONCURRENCY": "4",  # >= GATHER: a process whose runners all gather has them all
        "REL_BATCH_SIZE": "1",  # a claim takes one slot: the slots may go to different processes
        "REL_POLL_INTERVAL": "0.2",
    }
    workers = [fleet.start(backend, **env) for _ in range(4)]
    sampler = Sampler(fleet)

    # The gather jobs done (the meter works): their handlers ended and their
    # outcomes written (an outcome still in a completer when its process is
    # frozen and killed comes back through the lease and runs again); then
    # one process caught in a limited handler.
    def gathered() -> bool:
        sampler.sample()
        done = span_rows(
            fleet, "SELECT count(*) FROM {spans} WHERE kind = 'gather' AND ended_at IS NOT NULL"
        )[0][0]
        return bool(done == GATHER) and fleet.count("kind = 'gather'") == 0

    fleet.wait_until(gathered, "the gather jobs to run together", alive=workers)
    victim, frozen = freeze_one_in_a_limited_handler(fleet, workers, sampler)
    survivors = [w for w in workers if w is not victim]
    # Its handlers run no further: their spans end here, for the overlap.
    frozen_at = db_now(fleet)
    victim.proc.send_signal(signal.SIGKILL)
    assert victim.proc.wait() == -signal.SIGKILL
    fleet.wait_until(lambda: fleet.connections(victim) == 0, "the victim's connections to close")
    held = {
        job_id
        for (job_id,) in fleet.execute(
            "SELECT id FROM {table} WHERE status = 'running' AND locked_by = %s", victim.name
        )
    }

    def drained() -> bool:
        sampler.sample()
        return fleet.drained()

    fleet.wait_until(drained, "every job to succeed", alive=survivors)
    fleet.stop(*survivors)

    rows = span_rows(
        fleet,
        "SELECT job_id, attempt, pid, run_at, started_at, ended_at FROM {spans}"
        " WHERE kind = 'limited'",
    )
    held_limited = held & set(limited)
    mine = [(job_id, start, end) for job_id, _, pid, _, start, end in rows if pid == victim.pid]
    assert {job_id for job_id, _, end in mine if end is None} <= held_limited
    # When the reaper gave each job the dead process held back, freeing its
    # slot: the run_at of its next run, which the reaper set to its own
    # now() (a returned job is due at once).
    reaped_at = {
        job_id: run_at
        for job_id, _, pid, run_at, _, _ in rows
        if job_id in held_limited and pid != victim.pid
    }
    assert reaped_at.keys() == held_limited, f"{held_limited} did not run again"
    # The limit: at every moment, the limited handlers running and the dead
    # process's slots not yet returned are at most 2. Its handlers ran until
    # it froze; from then on each job it held keeps its slot until reaped.
    handlers = [(start, end) for job_id, _, pid, _, start, end in rows if pid != victim.pid]
    handlers += [
        (start, frozen_at if end is None or job_id in held_limited else end)
        for job_id, start, end in mine
    ]
    dead_slots = [(frozen_at, reaped_at[job_id]) for job_id in held_limited]
    overlap = most_at_once(handlers)
    slots_in_use = most_at_once(handlers + dead_slots)
    assert overlap <= slots_in_use == LIMIT, f"{slots_in_use} slots in use\n{fleet.output()}"
    # Nor more than 2 limited jobs running, or slots taken, on the server.
    assert sampler.most_running <= LIMIT
    assert sampler.most_taken <= LIMIT
    gather_spans = span_rows(
        fleet, "SELECT started_at, ended_at FROM {spans} WHERE kind = 'gather'"
    )
    assert most_at_once(gather_spans) >= GATHER  # what the spans see when runs overlap

    # Every job ran to its end; only the jobs the killed process held ran
    # again, with their next attempt, in a survivor.
    ended = {job_id for job_id, _, _, _, _, end in rows if end is not None}
    assert ended == set(limited), f"never ran to the end: {set(limited) - ended}"
    runs = [(job_id, attempt, pid) for job_id, attempt, pid, *_ in rows]
    twice = {job_id for job_id, _, _ in runs if sum(1 for j, _, _ in runs if j == job_id) > 1}
    assert frozen <= twice <= held_limited
    for job_id in frozen:
        [(first, _)] = [(a, p) for j, a, p in runs if j == job_id and p == victim.pid]
        [(attempt, pid)] = [(a, p) for j, a, p in runs if j == job_id and p != victim.pid]
        assert pid in {w.pid for w in survivors}
        assert attempt == first + 1
    assert "reaped" in fleet.output()
    gather_runs = span_rows(fleet, "SELECT job_id FROM {spans} WHERE kind = 'gather'")
    assert sorted(job_id for (job_id,) in gather_runs) == sorted(gather)
    slot_back = max((reaped_at[j] - frozen_at).total_seconds() for j in held_limited)

    # The slots are all free again, and there are as many as the limit.
    slots = fleet.execute(f"SELECT job_id FROM {fleet.table}_limit_slots WHERE limit_key = %s", KEY)
    assert slots == [(None,)] * LIMIT
    with pgqueue.Queue(fleet.dsn, table=fleet.table) as q:
        [state] = [s for s in q.limits() if s.key == KEY]
    assert (state.max_running, state.running, state.waiting) == (LIMIT, 0, 0)

    report.add(
        "19. a limit of 2 over 4 processes, one SIGKILLed",
        backend,
        load=f"{LIMITED_JOBS} jobs with limit_key (limit {LIMIT}, {LIMITED_SECONDS} s each)"
        f" + {GATHER} without, 4 processes x 4",
        faults=f"SIGKILL of 1 process in a limited handler ({len(held_limited)} limited job"
        f"{'s' if len(held_limited) != 1 else ''} held: slot back {slot_back:.1f} s later)",
        jobs=len(limited) + len(gather),
        lost=len(set(limited) - ended),
        duplicates=len(rows) - len(limited),
        most_limited_at_once=overlap,
        most_slots_in_use=slots_in_use,
        most_running_sampled=sampler.most_running,
        samples=sampler.samples,
    )


# -- 20. a cancel while the LISTEN connection is silenced, then cut ------------------------

CANCEL_LEASE = 20.0  # seconds: the heartbeat, a quarter of it, is 5 s while it listens
HEARTBEAT = CANCEL_LEASE / 4
UNHEARD_BEAT = 1.0  # the heartbeat while the worker knows it cannot listen
# Each cancel is sent just after a heartbeat, the worst moment. Silenced,
# the worker thinks it listens: the cancel comes with its next heartbeat.
# Bound: one heartbeat, and as long again.
SILENCED_BOUND = 2 * HEARTBEAT
# Cut, it knows, and beats every second: one of those beats, and 3 s for
# the handler to stop and its outcome to be written on a busy machine;
# less than the heartbeat it makes while it listens, which would bring the
# cancel one heartbeat after the last.
CUT_BOUND = UNHEARD_BEAT + 3.0
PHASE_KINDS = {
    "sync": ("polling", "checking"),  # plain handlers only
    "asyncio": ("forever", "polling"),
    "trio": ("forever", "polling"),
}


def cancelled_within(
    fleet: Fleet, q: pgqueue.Queue, ids: list[int], bound: float, worker: Worker
) -> float:
    """Cancel the running jobs ``ids``; wait until each is recorded
    cancelled; return the seconds from the cancel to the last outcome
    (the database's clock), which must be within ``bound``.

    The cancel goes just after a heartbeat (the jobs' ``locked_at`` moves),
    so that nothing but the next one can bring it in time."""
    [(beat,)] = fleet.execute("SELECT max(locked_at) FROM {table} WHERE id = ANY(%s)", ids)
    fleet.wait_until(
        lambda: (
            fleet.execute("SELECT max(locked_at) FROM {table} WHERE id = ANY(%s)", ids) > [(beat,)]
        ),
        "a heartbeat",
        alive=[worker],
    )
    sent = db_now(fleet)
    answer = q.cancel(*ids)
    assert (answer.deleted, answer.requested, answer.not_found) == ([], sorted(ids), [])

    def over() -> bool:
        results = [q.result(i) for i in ids]
        return all(r is not None and r.finished for r in results)

    fleet.wait_until(over, f"the cancel of {ids} to stop them", alive=[worker])
    results = [q.result(i) for i in ids]
    assert [r.outcome for r in results if r is not None] == ["cancelled"] * len(ids)
    took = max(r.finished_at for r in results if r is not None and r.finished_at) - sent
    seconds = round(took.total_seconds(), 2)
    assert seconds <= bound, f"stopped {seconds}s after the cancel\n{fleet.output()}"
    assert fleet.count("id = ANY(%s)", ids) == 0
    return seconds


def test_a_cancel_sent_while_the_listen_connection_is_silenced_or_cut_stops_the_job(
    spans: Fleet, backend: str, report: Report
) -> None:
    fleet = spans
    listen_as = f"pgqueue-reliability-listen-{fleet.table}"
    # Its LISTEN of the queue's channel comes last, after the control channel's.
    listen = Statements(fleet.table).listen.decode()
    kinds = PHASE_KINDS[backend]
    with Proxy(fleet.dsn) as proxy, pgqueue.Queue(fleet.dsn, table=fleet.table) as q:
        worker = fleet.start(
            backend,
            REL_LISTEN_DSN=proxy.dsn(application_name=listen_as),
            REL_VISIBILITY_TIMEOUT=str(CANCEL_LEASE),
            REL_CONCURRENCY="4",
            REL_BATCH_SIZE="4",  # a thread per plain job (not a chunk of several)
            REL_POLL_INTERVAL="0.2",
        )
        fleet.wait_until(
            lambda: bool(fleet.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND query = %s",
                listen_as, listen,
            )),
            "the worker to listen through the proxy",
            alive=[worker],
        )  # fmt: skip
        silenced_ids = [q.enqueue(kind, {}, result_ttl=RESULT_TTL) for kind in kinds]
        cut_ids = [q.enqueue(kind, {}, result_ttl=RESULT_TTL) for kind in kinds]
        fleet.wait_until(
            lambda: span_rows(fleet, "SELECT count(*) FROM {spans}")[0][0] == 4,
            "the four handlers to run",
            alive=[worker],
        )

        # Silenced: nothing comes through, and the worker cannot tell.
        assert proxy.freeze() == 1  # its LISTEN connection, and nothing else
        silenced = cancelled_within(fleet, q, silenced_ids, SILENCED_BOUND, worker)

        # Cut, and refused from then on: the worker knows it cannot listen.
        lost_before = worker.output().count("listener lost")
        proxy.close()
        fleet.wait_until(
            lambda: worker.output().count("listener lost") > lost_before,
            "the worker to see its listener cut",
            alive=[worker],
        )
        cut = cancelled_within(fleet, q, cut_ids, CUT_BOUND, worker)
        assert "polling meanwhile" in worker.output()

        rows = span_rows(fleet, "SELECT job_id, kind, ended_at, saw_cancel FROM {spans}")
        assert sorted(job_id for job_id, *_ in rows) == sorted(silenced_ids + cut_ids)
        # Each handler saw its cancel: the async one cancelled, the plain ones
        # through job_context().
        assert all(ended is not None and saw for _, _, ended, saw in rows), rows
        fleet.stop(worker)

    report.add(
        "20. cancel while the LISTEN connection is silenced, then cut",
        backend,
        load=f"1 process x 4, lease {CANCEL_LEASE:.0f} s, LISTEN through a proxy;"
        f" 2 x ({', '.join(kinds)}) running",
        faults="LISTEN connection silenced (no FIN, no RST), then cut and refused",
        jobs=4,
        lost=0,
        duplicates=0,
        recovery=f"silenced: stopped {silenced} s after the cancel; cut: {cut} s",
        bound=f"silenced: {SILENCED_BOUND:.0f} s (2 heartbeats); cut: {CUT_BOUND:.0f} s"
        f" ({UNHEARD_BEAT:.0f} s beat + 3 s)",
    )


# -- 21. wait() in another process through a SIGKILL and a retry ---------------------------

ANSWER_LEASE = "3"


def start_waiter(fleet: Fleet, backend: str, job_id: int, tmp_path: Path, name: str) -> (
    subprocess.Popen[bytes]
):  # fmt: skip
    """``q.wait(job_id)`` in a process of its own, on ``backend``."""
    with (tmp_path / "waiter.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.control_waiter", str(job_id),
             str(PATIENCE)],
            cwd=ROOT,
            env={
                **fleet.env,
                "PGQUEUE_DSN": make_conninfo(fleet.dsn, application_name=name),
                "REL_BACKEND": backend,
            },
            stdout=subprocess.PIPE,
            stderr=log,
        )  # fmt: skip


def test_wait_in_another_process_returns_the_retry_result_of_a_job_whose_worker_was_killed(
    spans: Fleet, backend: str, report: Report, tmp_path: Path
) -> None:
    fleet = spans
    env = {"REL_VISIBILITY_TIMEOUT": ANSWER_LEASE, "REL_POLL_INTERVAL": "0.2"}
    victim = fleet.start(backend, REL_HOLD="1", **env)
    with pgqueue.Queue(fleet.dsn, table=fleet.table) as q:
        job_id = q.enqueue("answer", {}, result_ttl=RESULT_TTL)
    fleet.wait_until(
        lambda: bool(span_rows(fleet, "SELECT 1 FROM {spans} WHERE pid = %s", victim.pid)),
        "the victim to run the job",
        alive=[victim],
    )

    # The waiter, waiting: its connection has looked at the job after its LISTEN.
    waiter_name = f"pgqueue-reliability-waiter-{fleet.table}"
    waiter = start_waiter(fleet, backend, job_id, tmp_path, waiter_name)
    # Its look at the job (the server shows it with $1 for its parameter).
    lookup = f'%FROM "{fleet.table}_results"%'
    try:

        def waiting() -> bool:
            assert waiter.poll() is None, (tmp_path / "waiter.log").read_text()
            return bool(fleet.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND query LIKE %s",
                waiter_name, lookup,
            ))  # fmt: skip

        fleet.wait_until(waiting, "the waiter to wait")
        victim.proc.send_signal(signal.SIGKILL)
        assert victim.proc.wait() == -signal.SIGKILL
        killed_at = db_now(fleet)
        survivor = fleet.start(backend, **env)
        out, _ = waiter.communicate(timeout=PATIENCE)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    assert waiter.returncode == 0, (tmp_path / "waiter.log").read_text()
    answer = json.loads(out)
    expected = {"job": job_id, "attempt": 2, "pid": survivor.pid}
    assert answer == {"value": expected}, f"{answer}\n{fleet.output()}"

    # The waiter waited through the kill; the job's second run was the survivor's.
    runs = span_rows(
        fleet, "SELECT attempt, pid FROM {spans} WHERE job_id = %s ORDER BY id", job_id
    )
    assert runs == [(1, victim.pid), (2, survivor.pid)]
    [(finished_at,)] = fleet.execute(
        f"SELECT finished_at FROM {fleet.table}_results WHERE job_id = %s", job_id
    )
    assert finished_at > killed_at
    assert "reaped" in survivor.output()
    with pgqueue.Queue(fleet.dsn, table=fleet.table) as q:
        result = q.result(job_id)
        assert result is not None
        assert (result.outcome, result.value) == ("succeeded", expected)
        assert q.wait(job_id, timeout=PATIENCE) == expected  # kept: at once, here too
    fleet.stop(survivor)

    report.add(
        "21. wait() in another process through a SIGKILL and a retry",
        backend,
        load="1 job with result_ttl; a waiter process; 1 process x 4, then another",
        faults="SIGKILL of the process running the job, the waiter waiting",
        jobs=1,
        lost=0,
        duplicates=len(runs) - 1,
    )
