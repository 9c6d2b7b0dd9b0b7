"""install() run at the same moment by several processes, as several deploys would."""

from __future__ import annotations

import multiprocessing
from multiprocessing.synchronize import Barrier
from typing import Any

import psycopg

import pgqueue
from pgqueue.core.migrations import MIGRATIONS

PROCESSES = 4


def install_after_barrier(dsn: str, table: str, barrier: Barrier, results: Any) -> None:
    with pgqueue.Queue(dsn, table=table, max_connections=1) as q:
        q.open()
        barrier.wait(timeout=60)  # every process connected: now all at once
        results.put(q.install())


def test_concurrent_installs_from_processes_apply_each_migration_exactly_once(
    dsn: str, table: str
) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=install_after_barrier, args=(dsn, table, barrier, results))
        for _ in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    applied = sorted((results.get(timeout=120) for _ in procs), key=len)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0

    assert applied == [[]] * (PROCESSES - 1) + [[m.version for m in MIGRATIONS]]
    with psycopg.connect(dsn) as conn:
        versions = conn.execute(
            "SELECT version FROM pgqueue_schema WHERE queue_table = %s ORDER BY version",
            (table,),
        ).fetchall()
    assert [v for (v,) in versions] == [m.version for m in MIGRATIONS]
