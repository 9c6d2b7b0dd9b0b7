"""Scenario 15: a role's ``statement_timeout``, a big table, a worker SIGKILLed.

DBAs set a short ``statement_timeout`` on application roles, and a queue
table can hold many dead jobs awaiting purge. A worker process is killed
holding jobs; the survivors, under a 10 ms timeout, must reap them (the
reaper reads the running jobs through their own index, migration 6: a scan
of the table takes longer than the timeout, which the test measures first)
and nothing is lost.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from typing import Any

from pgqueue.core.sql import Statements

from .conftest import Fleet, Report
from .test_crash import held_by
from .test_production import LONG_JOB, Role, roles, since, timed_wait

__all__ = ["roles"]  # the fixture, shared with test_production


STATEMENT_TIMEOUT_MS = 10
DEAD_ROWS_STEP = 300_000
DEAD_ROWS_MAX = 1_500_000
# The table is big enough when a sequential scan for the reaper takes twice
# the timeout (what the reaper did before migration 6).
SCAN_MARGIN = 2.0
TIMEOUT_LEASE = 4.0
# The victim's jobs come back one lease after its last heartbeat, at a
# survivor's next reap (every lease / 2), with 30 s of slack.
REAPED_BOUND = 2 * TIMEOUT_LEASE + 30.0
HELD = 4


def explain_expired(fleet: Fleet, options: bytes = b"FORMAT JSON") -> Any:
    """The JSON plan of the reaper's read of expired jobs (``EXPLAIN (options)``)."""
    [(plan,)] = fleet.raw.conn.execute(
        b"EXPLAIN (" + options + b") " + Statements(fleet.table).maintenance.expired, ("1 second",)
    ).fetchall()
    return plan


def seq_scan_ms(fleet: Fleet) -> float:
    """How long the reaper's read of expired jobs takes with no index to use."""
    with fleet.raw.conn.transaction(force_rollback=True):
        for planner in ("enable_indexscan", "enable_bitmapscan", "enable_indexonlyscan"):
            fleet.raw.conn.execute(f"SET LOCAL {planner} = off")
        plan = explain_expired(fleet, b"ANALYZE, FORMAT JSON")
    return float(plan[0]["Execution Time"])


def test_a_killed_workers_jobs_are_reaped_under_a_short_statement_timeout_on_a_big_table(
    fleet: Fleet, backend: str, roles: Callable[..., Role], report: Report
) -> None:
    dead = 0
    scan_ms = 0.0
    while scan_ms < SCAN_MARGIN * STATEMENT_TIMEOUT_MS and dead < DEAD_ROWS_MAX:
        fleet.execute(
            "INSERT INTO {table} (kind, status, attempts, run_at, last_error)"
            " SELECT 'old', 'dead', 3, now() - interval '1 day', 'ValueError: boom'"
            " FROM generate_series(1, %s)",
            DEAD_ROWS_STEP,
        )
        dead += DEAD_ROWS_STEP
        fleet.execute("ANALYZE {table}")
        scan_ms = seq_scan_ms(fleet)
    assert scan_ms > STATEMENT_TIMEOUT_MS, f"{dead:,} dead rows scanned in {scan_ms} ms"
    role = roles(statement_timeout=f"{STATEMENT_TIMEOUT_MS}ms")
    env = {"REL_VISIBILITY_TIMEOUT": str(TIMEOUT_LEASE), "REL_CONCURRENCY": str(HELD),
           "REL_BATCH_SIZE": str(HELD), "REL_POLL_INTERVAL": "0.5"}  # fmt: skip

    # The victim takes every long job and runs them; it is killed.
    ids = fleet.enqueue_specs([("sleep", LONG_JOB)] * HELD)
    victim = fleet.start(backend, dsn=role.dsn, **env)
    fleet.wait_until(lambda: len(fleet.executions("pid = %s", victim.pid)) == HELD,
                     "the victim to run its jobs", alive=[victim])  # fmt: skip
    victim.proc.send_signal(signal.SIGKILL)
    assert victim.proc.wait() == -signal.SIGKILL
    killed = time.monotonic()
    ids += fleet.enqueue(200)
    survivors = [fleet.start(backend, dsn=role.dsn, **env) for _ in range(2)]
    timed_wait(fleet, lambda: not held_by(fleet, victim.name), "the victim's jobs reaped",
               within=REAPED_BOUND, alive=survivors)  # fmt: skip
    reaped = since(killed)
    # Then they run alone, one by one, on an idle survivor; a survivor whose
    # claim the server cancelled may take a minute or more to count itself
    # idle (docs/reliability.md, "Known gaps"): that wait has the suite's patience.
    fleet.wait_until(lambda: fleet.count("status <> 'dead'") == 0, "every job to succeed",
                     alive=survivors)  # fmt: skip
    back = since(killed)
    fleet.stop(*survivors)

    tally = fleet.tally(ids)
    assert tally.lost == set()
    assert tally.duplicated == set(ids[:HELD])  # the victim's, run again
    output = "\n".join(w.output() for w in survivors)
    # The reaper ran under the timeout: it reads the running index, never the
    # table. A reaper that scanned the table would fail every time and
    # never log a reap. One of its statements may still be cancelled now and
    # then on a loaded machine (10 ms is short), as a claim may: it is
    # retried, counted in the report, and the bound above holds.
    assert "reaped" in output
    assert "Seq Scan" not in json.dumps(explain_expired(fleet))
    line = next(ln for ln in output.splitlines() if "reaped" in ln)
    report.add(
        "15. role statement_timeout, big table, worker SIGKILLed",
        backend,
        load=f"{len(ids)} jobs beside {dead:,} dead ones, 1 process x {HELD} killed, 2 survivors",
        faults=f"statement_timeout = {STATEMENT_TIMEOUT_MS}ms on the role (a scan of the table "
        f"takes {scan_ms:.0f} ms); SIGKILL of the process holding {HELD} jobs",
        jobs=len(ids),
        lost=len(tally.lost),
        duplicates=tally.duplicates,
        dead_rows=dead,
        seq_scan_ms=round(scan_ms, 1),
        reaped_s=reaped,
        back_s=back,
        recovery=f"the killed worker's jobs reaped {reaped} s after the kill; all jobs done "
        f"{back} s after it",
        bound=f"reaped within {REAPED_BOUND:.0f} s",
        log_line=line.split(": ", 1)[-1],
        claims_cancelled=output.count("claim failed (canceling statement due to statement timeout"),
        reaps_cancelled=output.count("reaper failed (canceling statement due to statement timeout"),
    )
