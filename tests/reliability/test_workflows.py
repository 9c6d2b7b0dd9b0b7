"""A group's ``then`` under a crash (issue 26): a 200-job group over 4 worker
processes, one of them SIGKILLed mid-run.

The killed worker's jobs come back with their lease and run again; their
first run released nothing (a success is what releases, and it was never
recorded). ``then`` runs exactly once, after the last run of every job of
the group.
"""

from __future__ import annotations

import signal

import pgqueue
from pgqueue import JobSpec

from .conftest import Fleet
from .test_crash import freeze_holding_jobs

LEASE = "8"
GROUP = 200


def test_a_groups_then_runs_once_after_all_of_it_though_a_worker_is_killed(
    fleet: Fleet, backend: str
) -> None:
    with pgqueue.Queue(fleet.dsn, table=fleet.table) as q:
        group = q.group(
            *[JobSpec("sleep", {"seconds": 0.05}) for _ in range(GROUP)], then=JobSpec("count")
        )
    assert group.then is not None
    env = {"REL_VISIBILITY_TIMEOUT": LEASE, "REL_CONCURRENCY": "4", "REL_BATCH_SIZE": "10"}
    victim, *survivors = [fleet.start(backend, **env) for _ in range(4)]

    def victim_busy() -> bool:
        assert group.then not in fleet.executions(), fleet.output()
        return fleet.executed() >= GROUP // 10 and bool(fleet.executions("pid = %s", victim.pid))

    fleet.wait_until(victim_busy, "the victim to be busy", alive=[victim])
    freeze_holding_jobs(fleet, victim)
    victim.proc.send_signal(signal.SIGKILL)
    assert victim.proc.wait() == -signal.SIGKILL

    fleet.wait_until(fleet.drained, "the group and its then to succeed", alive=survivors)
    fleet.stop(*survivors)
    runs = fleet.executions()
    assert runs[group.then] == 1
    assert all(runs[i] >= 1 for i in group.ids)
    ((then_at, last_part),) = fleet.execute(
        "SELECT (SELECT at FROM {executions} WHERE job_id = %s),"
        " (SELECT max(at) FROM {executions} WHERE job_id <> %s)",
        group.then,
        group.then,
    )
    assert then_at > last_part
