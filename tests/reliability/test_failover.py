"""Scenario 22: failover. The primary is killed mid-drain and its standby promoted.

A primary and a synchronous streaming standby from Debian's PostgreSQL 15
(`tests.reliability.ha`: ``initdb``, ``pg_basebackup -R``, free ports of
127.0.0.1, a directory of their own), and one ``pgqueue worker`` process
per backend on the multi-host DSN an application of a HA cluster uses
(``host=127.0.0.1,127.0.0.1 port=P,S target_session_attrs=read-write``).
Its handlers count their runs on the same DSN. Once a third of the jobs
ran, the primary is ``SIGKILL``ed, postmaster and backends at once, and
the standby promoted at once (``pg_ctl promote``), as a cluster manager
would. Then: every job ran at least once and none is left, the worker
never exited and listens again on the new primary, and it stops cleanly.
The seconds from the promotion to the first job claimed on the new
primary are printed (``-s``) and reported, bounded only by a liveness
deadline.

Replication is synchronous so that an acknowledged commit is on the
standby: what the failover loses is pgqueue's doing, not the replication's
(docs/operations.md, "High availability", says what asynchronous
replication may lose).

It needs Debian's ``postgresql-15`` package (or ``PGQUEUE_TEST_PG_BIN``
naming another bin directory); without it the test is skipped with a note,
and fails in CI (``CI`` set), where ``.ci/run`` installs the package.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from ..conftest import Raw
from .conftest import Fleet, Report
from .ha import ReplicatedPair

JOBS = 3_000
# A claim whose answer the kill cut off leaves its jobs running on the new
# primary, in no worker's hands: a short lease brings them back soon.
LEASE = 5.0
# A liveness deadline for the first job after the promotion: it must come
# at all (the issue measured under a second).
LIVENESS = 60.0
DEFAULT_BIN = "/usr/lib/postgresql/15/bin"


@pytest.fixture
def pair() -> Iterator[ReplicatedPair]:
    bins = Path(os.environ.get("PGQUEUE_TEST_PG_BIN") or DEFAULT_BIN)
    if not (bins / "pg_basebackup").exists():
        note = (
            f"{bins / 'pg_basebackup'} not found: install Debian's postgresql-15 package,"
            " or set PGQUEUE_TEST_PG_BIN"
        )
        if os.environ.get("CI"):
            pytest.fail(note)
        pytest.skip(note)
    servers = ReplicatedPair(bins)
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()


def test_a_worker_rides_out_a_failover_to_the_promoted_standby_and_loses_nothing(
    pair: ReplicatedPair, backend: str, tmp_path: Path, report: Report
) -> None:
    dsn = pair.multi_host_dsn
    fleet = Fleet(dsn, "jobs", Raw(psycopg.connect(dsn, autocommit=True), "jobs"), tmp_path)
    try:
        fleet.setup()
        ids = fleet.enqueue(JOBS)
        env = {"REL_VISIBILITY_TIMEOUT": str(LEASE), "REL_CONCURRENCY": "4"}
        worker = fleet.start(backend, **env)
        fleet.wait_until(lambda: fleet.listeners() == 1, "the listener", alive=[worker])
        fleet.wait_until(
            lambda: fleet.executed() >= JOBS // 3, "a third of the jobs", alive=[worker]
        )
        assert not fleet.drained(), "the drain ended before the failover"

        pair.kill_primary()
        promoting = datetime.now(UTC)
        started = time.monotonic()
        pair.promote()
        promoted = time.monotonic() - started

        fleet.wait_until(fleet.drained, "every job to succeed", alive=[worker])
        # The worker listens again, on the new primary.
        fleet.wait_until(lambda: fleet.listeners() == 1, "the listener", alive=[worker])
        ((first_claim,),) = fleet.execute(
            "SELECT min(locked_at) FROM {executions} WHERE locked_at >= %s", promoting
        )
        fleet.stop(worker)
        tally = fleet.tally(ids)
    finally:
        fleet.teardown()
        fleet.raw.conn.close()

    assert tally.lost == set()
    assert set(tally.executions) == set(ids)
    assert first_claim is not None
    next_job = (first_claim - promoting).total_seconds()
    assert next_job < LIVENESS, fleet.output()
    print(
        f"\nfailover ({backend}): promotion took {promoted:.2f} s; the next job was claimed"
        f" {next_job:.2f} s after it began; {tally.duplicates} jobs ran twice"
    )
    report.add(
        "22. failover: primary killed mid-drain, standby promoted",
        backend,
        load=f"{JOBS:,} jobs, 1 process x 4, multi-host DSN, synchronous standby",
        faults="SIGKILL of the primary's postmaster and backends; pg_ctl promote",
        jobs=JOBS,
        lost=len(tally.lost),
        duplicates=tally.duplicates,
        recovery=f"next job claimed {next_job:.2f} s after the promotion began"
        f" (promote took {promoted:.2f} s)",
        bound=f"{LIVENESS:.0f} s (liveness)",
    )
