"""Scenario 17: concurrent unique enqueues with random rollbacks leave exactly one job.

Racer processes (`tests.reliability.unique_racer`) enqueue jobs with the same
few unique keys, in transactions of their own that commit or roll back at
random, one job or a batch at a time, with every ``on_duplicate``. Each
records what its calls returned in the transaction of the enqueue, so a
record exists exactly when its enqueue committed. No unique violation or
deadlock may escape to a racer.

- Without workers, a key's first committed job holds it for good. The keys
  are new every 0.2 s, so that the racers find them free and fight for
  them, waiting for each other's open transactions, again and again: at the
  end exactly one job holds each key, and every committed enqueue returned
  (or raised with) that job's id; its payload is a committed one.
- With workers draining the queue, keys change hands as their jobs start
  and end (and windows run out): every id a committed enqueue returned is a
  job that committed and ran, every job that ran was returned to the
  enqueue that created it, and two jobs of one window key were created a
  window apart or more (by the database's clock).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from .conftest import PATIENCE, ROOT, Fleet, Report

RACERS = 4
WINDOW_SECONDS = 1.0


@pytest.fixture
def races(fleet: Fleet) -> Iterator[Fleet]:
    # (The fixture's table names are t_ and hex digits: safe as they are.)
    fleet.execute(
        f"CREATE TABLE {fleet.table}_races (id bigserial PRIMARY KEY, racer int NOT NULL,"
        " turn int NOT NULL, key text NOT NULL, rule text NOT NULL, on_duplicate text NOT NULL,"
        " payload jsonb, job_id bigint NOT NULL, raised boolean NOT NULL,"
        " at timestamptz NOT NULL DEFAULT clock_timestamp())"
    )
    fleet.execute(
        f"CREATE TABLE {fleet.table}_race_errors (racer int, turn int, error text,"
        " at timestamptz NOT NULL DEFAULT clock_timestamp())"
    )
    try:
        yield fleet
    finally:
        fleet.execute(f"DROP TABLE IF EXISTS {fleet.table}_races, {fleet.table}_race_errors")


def race(
    fleet: Fleet, tmp_path: Path, keys: dict[str, str | float], seconds: float, **env: str
) -> int:
    """Run the racers for ``seconds`` from a common start; each must exit 0.
    Returns how often one was seen waiting for another's transaction."""
    start = time.time() + 2.0  # every racer connected and waiting by then
    procs = []
    for n in range(RACERS):
        log = tmp_path / f"racer-{n}.log"
        with log.open("wb") as out:
            procs.append(
                (
                    subprocess.Popen(
                        [sys.executable, "-m", "tests.reliability.unique_racer"],
                        cwd=ROOT,
                        env={
                            **fleet.env,
                            "RACE_ID": str(n),
                            "RACE_KEYS": json.dumps(keys),
                            "RACE_START": str(start),
                            "RACE_SECONDS": str(seconds),
                            **env,
                        },
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    ),
                    log,
                )
            )
    # Watch them: an enqueue waiting for another's open transaction is the race.
    waits = 0
    deadline = time.monotonic() + PATIENCE
    while any(proc.poll() is None for proc, _ in procs) and time.monotonic() < deadline:
        waits += int(
            fleet.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND backend_type = 'client backend' AND query LIKE %s",
                f"%{fleet.table}%",
            )[0][0]
        )
        time.sleep(0.02)
    for proc, log in procs:
        code = proc.wait(timeout=PATIENCE)
        assert code == 0, f"racer exited {code}:\n{log.read_text()}"
    errors = fleet.execute(f"SELECT racer, turn, error FROM {fleet.table}_race_errors")
    assert errors == [], errors
    return waits


def records(fleet: Fleet) -> list[tuple[Any, ...]]:
    """Every committed enqueue's record: key, rule, on_duplicate, payload, id, raised."""
    return fleet.execute(
        f"SELECT key, rule, on_duplicate, payload, job_id, raised FROM {fleet.table}_races"
    )


def test_concurrent_unique_enqueues_with_random_rollbacks_leave_exactly_one_job(
    races: Fleet, tmp_path: Path, report: Report
) -> None:
    fleet = races
    keys: dict[str, str | float] = {
        "q1": "queued",
        "q2": "queued",
        "a1": "active",
        "a2": "active",
        "w1": 3600.0,
        "w2": 3600.0,
    }
    waits = race(fleet, tmp_path, keys, seconds=10.0, RACE_ROUND_SECONDS="0.2")

    jobs = {
        key: (job_id, scope, payload)
        for job_id, key, scope, payload in fleet.execute(
            "SELECT id, unique_key, unique_scope, payload FROM {table}"
        )
    }
    committed = records(fleet)
    by_key: dict[str, list[tuple[str, Any, int, bool]]] = defaultdict(list)
    for key, _rule, on_duplicate, payload, job_id, raised in committed:
        by_key[key].append((on_duplicate, payload, job_id, raised))
    # Exactly one job per key that had a committed enqueue, and nothing else.
    assert fleet.count() == len(jobs)
    assert set(by_key) == set(jobs)
    for key, calls in by_key.items():
        job_id, scope, payload = jobs[key]
        rule = keys[key.partition(".")[0]]
        assert scope == ("window" if isinstance(rule, float) else rule)
        # Every committed enqueue of the key returned that job, or raised naming it.
        assert {i for _, _, i, _ in calls} == {job_id}, key
        # Its payload is its first committed one or a committed replacement:
        # a rolled-back replace left nothing behind.
        assert payload in [p for d, p, _, raised in calls if not raised], key
    attempted = len(committed)
    report.add(
        "17. concurrent unique enqueues with random rollbacks",
        "sync",
        load=f"{RACERS} processes x 10 s on {len(keys)} keys new every 0.2 s (queued, active,"
        f" 1 h window): {len(jobs)} keys, {attempted:,} committed enqueues",
        faults="half the transactions rolled back; batches of keys in random order;"
        f" an enqueue seen waiting for another's transaction {waits} times",
        jobs=len(jobs),
        lost=0,
        duplicates=0,
        raised=sum(1 for c in committed if c[5]),
    )


def test_keys_change_hands_under_draining_workers_without_a_collision(
    races: Fleet, tmp_path: Path, report: Report
) -> None:
    fleet = races
    keys: dict[str, str | float] = {
        "q1": "queued",
        "q2": "queued",
        "a1": "active",
        "a2": "active",
        "w1": WINDOW_SECONDS,
        "w2": WINDOW_SECONDS,
    }
    workers = [
        fleet.start(b, REL_CONCURRENCY="4", REL_BATCH_SIZE="4", REL_POLL_INTERVAL="0.1")
        for b in ("sync", "asyncio")
    ]
    waits = race(fleet, tmp_path, keys, seconds=10.0, RACE_KIND="sleep", RACE_JOB_SECONDS="0.05")
    fleet.wait_until(fleet.drained, "every job to run", alive=workers)
    fleet.stop(*workers)

    committed = records(fleet)
    returned = {job_id for *_, job_id, _raised in committed}
    ran = fleet.executions()
    # Every id a committed enqueue saw is a job that committed (and so ran);
    # every job that ran was created by a committed enqueue, which recorded it.
    assert returned == set(ran)
    assert all(n == 1 for n in ran.values())
    # Keys changed hands: each held by several jobs over the race.
    per_key: dict[str, set[int]] = defaultdict(set)
    for key, *_, job_id, _raised in committed:
        per_key[key].add(job_id)
    assert all(len(ids) > 1 for ids in per_key.values()), per_key
    # Two jobs of one window key were created a window apart or more.
    created = dict(fleet.execute("SELECT job_id, created_at FROM {executions}"))
    for key in ("w1", "w2"):
        times = sorted(created[i] for i in per_key[key])
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert min(gaps) >= timedelta(seconds=WINDOW_SECONDS), (key, gaps)
    report.add(
        "17. concurrent unique enqueues with random rollbacks",
        "sync + asyncio workers",
        load=f"{RACERS} processes x 10 s on {len(keys)} keys (queued, active, 1 s window),"
        f" 2 worker processes x 4 draining",
        faults="half the transactions rolled back; batches of keys in random order;"
        f" an enqueue seen waiting for another's transaction {waits} times",
        jobs=len(ran),
        lost=0,
        duplicates=sum(n - 1 for n in ran.values()),
        committed_enqueues=len(committed),
    )
