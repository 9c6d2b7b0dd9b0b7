"""Scenarios 1 and 5: a worker process dies mid-drain (SIGKILL, or its own handler's ``os._exit``).

Nothing gives the dead process's jobs back: they stay ``running`` under its
name until their lease expires and a surviving worker's reaper returns
them. Every job is handled at least once, and only jobs the dead process
held are handled twice.
"""

from __future__ import annotations

import signal

import pgqueue
from pgqueue import JobSpec

from .conftest import Fleet, Report, Scale, Worker

# Seconds of visibility timeout: short, so that the reaper comes soon, yet
# many heartbeats long, so that a busy machine never lets a living worker's
# lease run out.
LEASE = "8"
POISON_LEASE = "4"  # three deaths, each waiting for a lease


def held_by(fleet: Fleet, name: str) -> set[int]:
    rows = fleet.execute("SELECT id FROM {table} WHERE status = 'running' AND locked_by = %s", name)
    return {job_id for (job_id,) in rows}


def freeze_holding_jobs(fleet: Fleet, victim: Worker) -> set[int]:
    """SIGSTOP ``victim`` at a moment it holds jobs and has no statement in
    flight, so that what it holds cannot change before it is killed; return
    those jobs."""
    while True:
        victim.proc.send_signal(signal.SIGSTOP)
        fleet.wait_until(
            lambda: fleet.statements_running(victim) == 0, "the victim's statements to end"
        )
        held = held_by(fleet, victim.name)
        if held:
            return held
        # Caught between two batches: let it claim the next one.
        victim.proc.send_signal(signal.SIGCONT)
        fleet.wait_until(
            lambda: bool(held_by(fleet, victim.name)), "the victim to hold jobs", alive=[victim]
        )


def test_sigkilled_worker_loses_no_job_and_only_its_held_jobs_run_twice(
    fleet: Fleet, backend: str, scale: Scale, report: Report
) -> None:
    ids = fleet.enqueue(scale.kill_jobs)
    env = {"REL_VISIBILITY_TIMEOUT": LEASE, "REL_CONCURRENCY": "4", "REL_BATCH_SIZE": "50"}
    victim, *survivors = [fleet.start(backend, **env) for _ in range(3)]

    # Mid-drain: the victim has run jobs and holds a batch, with plenty left.
    def victim_busy() -> bool:
        assert not fleet.drained(), f"drained before the victim was busy\n{fleet.output()}"
        return (
            fleet.executed() >= len(ids) // 10
            and bool(fleet.executions("pid = %s", victim.pid))
            and bool(held_by(fleet, victim.name))
        )

    fleet.wait_until(victim_busy, "the victim to be busy", alive=[victim])
    frozen = freeze_holding_jobs(fleet, victim)
    victim.proc.send_signal(signal.SIGKILL)
    assert victim.proc.wait() == -signal.SIGKILL
    # A claim sent as the victim froze (still on its way to the server, not
    # yet seen running) may commit after: what it holds is read once the
    # server has closed its connections, and then nothing changes it.
    fleet.wait_until(lambda: fleet.connections(victim) == 0, "the victim's connections to close")
    held = held_by(fleet, victim.name)
    # Nobody gave its jobs back: what it held is still running under its name
    # (until its lease expires, which a long freeze could bring close); more
    # only by the claims that were on their way (two at most, of 50).
    assert len(held - frozen) <= 2 * 50

    fleet.wait_until(fleet.drained, "every job to succeed", alive=survivors)
    fleet.stop(*survivors)

    tally = fleet.tally(ids)
    # Read at the end: a statement the victim sent just before it died may
    # still have committed after it died.
    started_by_victim = set(fleet.executions("pid = %s", victim.pid))
    assert tally.lost == set()
    assert set(tally.executions) == set(ids)
    assert held, "the victim held no job when it was killed"
    assert tally.duplicated <= held & started_by_victim
    assert "reaped" in fleet.output()
    assert fleet.count("status = 'running'") == 0
    report.add(
        "1. worker SIGKILLed mid-drain",
        backend,
        load=f"{len(ids):,} jobs, 3 processes x 4",
        faults="SIGKILL of 1 process holding a batch",
        jobs=len(ids),
        lost=len(tally.lost),
        duplicates=tally.duplicates,
        held_by_killed=len(held),
    )


def test_poison_job_that_kills_its_worker_goes_dead_and_the_queue_keeps_flowing(
    fleet: Fleet, backend: str, scale: Scale, report: Report
) -> None:
    # Every job has the poison job's 3 attempts: the first death costs the
    # jobs held beside it one attempt, after which the reaper's orphans run
    # alone, so the later deaths take only the poison job down.
    half = scale.poison_jobs // 2
    with pgqueue.Queue(fleet.dsn, table=fleet.table) as q:
        ids = q.enqueue_many([JobSpec("count", i, max_attempts=3) for i in range(half)])
        poison_id = q.enqueue("poison", {"exit": 3}, max_attempts=3)
        ids += q.enqueue_many(
            [JobSpec("count", i, max_attempts=3) for i in range(half, scale.poison_jobs)]
        )
    env = {"REL_VISIBILITY_TIMEOUT": POISON_LEASE, "REL_CONCURRENCY": "4", "REL_BATCH_SIZE": "10"}

    def settled() -> bool:
        assert fleet.count("status = 'dead' AND id <> %s", poison_id) == 0, fleet.output()
        status = fleet.execute("SELECT status FROM {table} WHERE id = %s", poison_id)
        return status == [("dead",)] and fleet.count() == 1

    # A supervisor: whenever the worker process dies, start another.
    deaths: list[int] = []
    held: list[set[int]] = []  # what each dead process held
    worker = fleet.start(backend, **env)
    while not settled():
        if not worker.alive():
            deaths.append(worker.proc.returncode)
            held.append(held_by(fleet, worker.name))
            assert len(deaths) <= 3, f"the poison job killed more than 3 workers\n{fleet.output()}"
            worker = fleet.start(backend, **env)

        def over(w: Worker = worker) -> bool:
            return settled() or not w.alive()

        fleet.wait_until(over, "the poison job to be dead")
    fleet.stop(worker)

    assert deaths == [3, 3, 3]  # one death per attempt, each by the handler's own exit
    dead = fleet.execute(
        "SELECT status, attempts, last_error FROM {table} WHERE id = %s", poison_id
    )
    [(status, attempts, last_error)] = dead
    assert (status, attempts) == ("dead", 3)
    assert "lease expired" in last_error
    assert fleet.executions("job_id = %s", poison_id) == {poison_id: 3}
    assert "buried 1 jobs" in fleet.output()
    # Run alone after the first death, the poison job took nothing else down.
    assert poison_id in held[0]
    assert held[1:] == [{poison_id}, {poison_id}]
    assert "running it alone" in fleet.output()
    tally = fleet.tally(ids)
    assert tally.lost == set()
    assert tally.duplicated <= held[0]  # only jobs held at the first death ran again
    assert max(tally.executions[job_id] for job_id in ids) <= 2
    report.add(
        "5. poison job (handler calls os._exit)",
        backend,
        load=f"{len(ids):,} jobs + 1 poison job, all max_attempts=3, 1 process x 4, restarted",
        faults="3 process deaths (os._exit in the handler)",
        jobs=len(ids),
        lost=len(tally.lost),
        duplicates=tally.duplicates,
        collateral_attempts=len(held[0] - {poison_id}),
    )
