"""Scenario 9: scheduling follows the database's clock, never the client's.

The enqueuer and the worker run in processes whose wall clock is an hour
ahead or an hour behind (`tests.reliability.skewed`). Were a delay added
to the client's clock, a clock behind would run delayed jobs early and a
clock ahead would hold every job back for an hour. Every time compared
here is the database's: when the job was created, when it was due, and
when its handler ran (``clock_timestamp()`` at the count).
"""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest

from .conftest import PATIENCE, ROOT, Fleet, Report

DELAY = 3  # seconds
PER_WAY = 5  # jobs due now and due later, by enqueue and by enqueue_many each
HOUR = 3600


@pytest.mark.parametrize("skew", [HOUR, -HOUR], ids=["client-ahead", "client-behind"])
def test_a_skewed_client_clock_neither_runs_jobs_early_nor_holds_them_back(
    fleet: Fleet, backend: str, skew: int, report: Report
) -> None:
    launcher = ("-m", "tests.reliability.skewed", str(skew))
    enqueued = subprocess.run(
        [sys.executable, *launcher, "enqueue", str(PER_WAY), str(DELAY)],
        cwd=ROOT,
        env=fleet.env,
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=False,
    )
    assert enqueued.returncode == 0, enqueued.stderr
    jobs = 4 * PER_WAY
    worker = fleet.start(backend, launcher=launcher, REL_POLL_INTERVAL="0.2")
    fleet.wait_until(lambda: fleet.executed() >= jobs, "every job to run", alive=[worker])
    fleet.wait_until(fleet.drained, "every job to succeed", alive=[worker])
    fleet.stop(worker)

    rows = fleet.execute(
        "SELECT run_at - created_at, at - run_at, client_time - at FROM {executions}"
    )
    assert len(rows) == jobs
    delays = sorted(delay for delay, _, _ in rows)
    # Due exactly when asked, by the database's clock: at once, or DELAY later.
    assert delays == [timedelta(0)] * (jobs // 2) + [timedelta(seconds=DELAY)] * (jobs // 2)
    # None ran before it was due.
    assert all(waited >= timedelta(0) for _, waited, _ in rows)
    # The fake clock was in force in the worker: its readings are an hour off.
    assert all(abs(off.total_seconds() - skew) < HOUR / 2 for _, _, off in rows)
    report.add(
        "9. client clock skewed",
        backend,
        load=f"{jobs} jobs: half due at once, half in {DELAY}s",
        faults=f"enqueuer's and worker's wall clock {skew // HOUR:+d} h",
        jobs=jobs,
        lost=0,
        duplicates=0,
        early=sum(waited < timedelta(0) for _, waited, _ in rows),
    )
