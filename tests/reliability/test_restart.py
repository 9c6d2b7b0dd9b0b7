"""Scenarios 2 and 3: the database restarts under a drain; the listener's connection is cut.

The restart scenario runs on a private server (``pg_ctl restart``, same
data directory, same socket), never on the server the other tests share.
"""

from __future__ import annotations

from .conftest import Fleet, PrivateServer, Report, Scale


def test_workers_ride_out_fast_and_immediate_database_restarts_and_lose_nothing(
    private_fleet: Fleet, private_server: PrivateServer, backend: str, scale: Scale, report: Report
) -> None:
    fleet = private_fleet
    ids = fleet.enqueue(scale.restart_jobs)
    # After the immediate shutdown, jobs whose completion the server forgot stay
    # running until their lease runs out: a short one keeps the wait short.
    env = {"REL_VISIBILITY_TIMEOUT": "10", "REL_CONCURRENCY": "4", "REL_BATCH_SIZE": "50"}
    workers = [fleet.start(backend, **env) for _ in range(2)]
    fleet.wait_until(lambda: fleet.listeners() == len(workers), "the listeners", alive=workers)

    for mode, progress in (("fast", 1 / 5), ("immediate", 2 / 5)):

        def reached(p: float = progress) -> bool:
            return fleet.executed() >= len(ids) * p

        fleet.wait_until(
            reached,
            f"{progress:.0%} of the jobs before the {mode} restart",
            alive=workers,
        )
        assert not fleet.drained(), "the drain ended before the restart"
        private_server.restart(mode)

    fleet.wait_until(fleet.drained, "every job to succeed", alive=workers)
    # The listeners came back on their own, one per worker process.
    fleet.wait_until(lambda: fleet.listeners() == len(workers), "the listeners", alive=workers)
    fleet.stop(*workers)

    tally = fleet.tally(ids)
    assert tally.lost == set()
    assert set(tally.executions) == set(ids)
    output = fleet.output()
    assert "listener lost" in output
    assert "retrying" in output
    report.add(
        "2. database restarted during a drain",
        backend,
        load=f"{len(ids):,} jobs, 2 processes x 4",
        faults="pg_ctl restart -m fast, then -m immediate",
        jobs=len(ids),
        lost=len(tally.lost),
        duplicates=tally.duplicates,
    )


def test_jobs_keep_flowing_while_the_listener_is_cut_again_and_again_and_it_returns(
    fleet: Fleet, backend: str, scale: Scale, report: Report
) -> None:
    env = {"REL_POLL_INTERVAL": "0.5", "REL_CONCURRENCY": "4", "REL_BATCH_SIZE": "20"}
    workers = [fleet.start(backend, **env) for _ in range(2)]

    ids: list[int] = []
    cuts = 0
    rounds = 10
    for r in range(rounds):
        # Each round cuts every listener, once they are back.
        fleet.wait_until(
            lambda: fleet.listeners() == len(workers), "the listeners to return", alive=workers
        )
        cuts += fleet.terminate_listeners()
        batch = fleet.enqueue(scale.listener_jobs // rounds, start=len(ids))
        ids += batch

        def handled(batch: list[int] = batch) -> bool:
            nonlocal cuts
            # Cut every listener that comes back while the batch is waiting.
            cuts += fleet.terminate_listeners()
            return set(batch) <= set(fleet.executions("job_id = ANY(%s)", batch))

        fleet.wait_until(handled, f"round {r + 1}'s jobs", alive=workers)

    fleet.wait_until(fleet.drained, "every job to succeed", alive=workers)
    fleet.wait_until(lambda: fleet.listeners() == len(workers), "the listeners", alive=workers)
    fleet.stop(*workers)

    tally = fleet.tally(ids)
    assert tally.lost == set()
    assert tally.duplicated == set()  # a lost listener costs no job and runs none twice
    assert cuts >= rounds * len(workers)
    assert "listener lost" in fleet.output()
    report.add(
        "3. listener connection cut repeatedly",
        backend,
        load=f"{len(ids):,} jobs in {rounds} rounds, 2 processes x 4",
        faults=f"{cuts} LISTEN connections terminated (pg_terminate_backend)",
        jobs=len(ids),
        lost=len(tally.lost),
        duplicates=tally.duplicates,
    )
