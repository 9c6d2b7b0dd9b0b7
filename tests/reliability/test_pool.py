"""Scenario 6: more workers than connections, and statements that block on locks held elsewhere.

The worker's queue gets a pool of two connections for eight concurrent
jobs (plus the claim, the completions, the heartbeat and the reaper). A
test connection then holds locks on the queue table: first row locks on
the running jobs (``SELECT ... FOR UPDATE``: the worker's completions and
heartbeats block on them), then the whole table (``LOCK TABLE``: every
statement blocks). The worker must neither deadlock nor lose a job, and
must say in its log what it is waiting for.
"""

from __future__ import annotations

import psycopg

from .conftest import Fleet, Report, Scale, Worker

LOCKS = {
    "row locks": "SELECT id FROM {table} WHERE status = 'running' FOR UPDATE",
    "table lock": "LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE",
}


def blocked_backends(fleet: Fleet) -> int:
    """Backends waiting for a lock on a statement that touches the queue's table."""
    rows = fleet.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
        f'%"{fleet.table}"%',
    )
    return int(rows[0][0])


def stall_lines(worker: Worker) -> list[str]:
    return [line for line in worker.output().splitlines() if "waiting on the database" in line]


def test_small_pool_and_locked_table_neither_deadlock_nor_lose_a_job_and_say_why(
    fleet: Fleet, backend: str, scale: Scale, report: Report
) -> None:
    ids = fleet.enqueue(scale.pool_jobs)
    env = {
        "REL_POOL_SIZE": "2",
        # Longer than STALL_WARNING: a task waiting for a connection is logged, not failed.
        "REL_POOL_TIMEOUT": "30",
        "REL_CONCURRENCY": "8",
        "REL_BATCH_SIZE": "10",
        "REL_VISIBILITY_TIMEOUT": "60",
    }
    worker = fleet.start(backend, **env)
    total = len(ids)  # the progress marks; top-ups come on top
    for n, (name, statement) in enumerate(LOCKS.items(), start=1):
        # Wait for the drain to be under way.

        def progressed(n: int = n) -> bool:
            return fleet.executed() >= total * n // 3

        fleet.wait_until(
            progressed,
            f"progress before the {name}",
            alive=[worker],
        )
        before = len(stall_lines(worker))
        with psycopg.connect(fleet.dsn) as holder:  # a transaction, held until the block ends
            cur = holder.execute(statement.format(table=f'"{fleet.table}"'))
            # Row locks catch only jobs running at that moment: try until some are caught,
            # topping the queue up should the drain have ended in between.
            while name == "row locks" and cur.rowcount == 0:
                holder.rollback()
                if fleet.count("status = 'pending'") == 0:
                    ids += fleet.enqueue(200, start=len(ids))
                cur = holder.execute(statement.format(table=f'"{fleet.table}"'))
            fleet.wait_until(
                lambda: blocked_backends(fleet) > 0, f"the worker to block on the {name}"
            )

            def logged(before: int = before) -> bool:
                return len(stall_lines(worker)) > before

            fleet.wait_until(
                logged,
                f"the worker to log the stall ({name})",
                alive=[worker],
            )
        # The transaction ended: the locks are gone.

    fleet.wait_until(fleet.drained, "every job to succeed", alive=[worker])
    fleet.stop(worker)

    tally = fleet.tally(ids)
    assert tally.lost == set()
    assert tally.duplicated == set()
    output = worker.output()
    assert "returned after" in output
    report.add(
        "6. pool of 2 for 8 workers; row and table locks held",
        backend,
        load=f"{len(ids):,} jobs, 1 process x 8 on 2 connections",
        faults="SELECT ... FOR UPDATE on running jobs, then LOCK TABLE, each until the stall "
        "is logged",
        jobs=len(ids),
        lost=len(tally.lost),
        duplicates=tally.duplicates,
        log_line=stall_lines(worker)[0].split(": ", 1)[-1],
    )
