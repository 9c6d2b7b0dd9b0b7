"""Scenario 4: with no fault, every job is handled exactly once, across processes and backends."""

from __future__ import annotations

from .conftest import Fleet, Report, Scale


def test_mixed_fleet_without_faults_handles_every_job_exactly_once(
    fleet: Fleet, scale: Scale, report: Report
) -> None:
    ids = fleet.enqueue(scale.exactly_once_jobs)
    env = {"REL_CONCURRENCY": "8", "REL_BATCH_SIZE": "50"}
    workers = [
        fleet.start("sync", **env),
        fleet.start("sync", **env),
        fleet.start("asyncio", **env),
        fleet.start("trio", **env),
    ]
    fleet.wait_until(fleet.drained, "every job to succeed", alive=workers)
    fleet.stop(*workers)

    tally = fleet.tally(ids)
    assert tally.lost == set()
    assert tally.duplicated == set()
    assert tally.executions == {job_id: 1 for job_id in ids}
    by_backend = dict(fleet.execute("SELECT backend, count(*) FROM {executions} GROUP BY 1"))
    report.add(
        "4. exactly once without faults",
        "sync x2 + asyncio + trio",
        load=f"{len(ids):,} jobs, 4 processes x 8",
        faults="none",
        jobs=len(ids),
        lost=len(tally.lost),
        duplicates=tally.duplicates,
        handled_by=by_backend,
    )
