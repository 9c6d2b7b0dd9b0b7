"""`pgqueue.core.heads`: when a worker's claims use heads, and when they rescan (no I/O)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from pgqueue.core.heads import NO_HEADS, WALK_FACTOR, WALK_SLACK, Heads
from pgqueue.core.jobs import Job, JobStatus

LIMIT = 10
WALKED = WALK_FACTOR * LIMIT + WALK_SLACK + 1  # a claim that walked dead entries
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def job(id_: int, seconds: int = 0, priority: int = 0) -> Job:
    return Job(id=id_, kind="k", payload=None, attempts=1, max_attempts=3,
               status=JobStatus.RUNNING, run_at=T0 + timedelta(seconds=seconds),
               last_error=None, locked_by="w", locked_at=T0, created_at=T0,
               priority=priority)  # fmt: skip


def test_heads_come_into_use_when_a_claim_walks_and_go_when_a_rescan_does_not() -> None:
    heads = Heads(rescan_every=5.0)
    limit = 10
    many = WALK_FACTOR * limit + WALK_SLACK + 1
    assert heads.send(now=0.0) is NO_HEADS
    heads.landed(NO_HEADS, [], walked=many - 1, limit=limit, now=0.0)
    assert not heads.in_use
    heads.landed(NO_HEADS, [], walked=many, limit=limit, now=0.0)
    assert heads.in_use
    assert heads.send(now=4.9).rescan is False
    rescan = heads.send(now=5.0)
    assert rescan.rescan and rescan.heads == ()
    # A rescan that still walks keeps heads; one that does not ends them.
    heads.landed(rescan, [], walked=many, limit=limit, now=5.0)
    assert heads.in_use and not heads.send(now=9.9).rescan and heads.send(now=10.0).rescan
    heads.landed(heads.send(now=10.0), [], walked=3, limit=limit, now=10.0)
    assert not heads.in_use and heads.send(now=11.0) is NO_HEADS


def test_heads_are_the_last_job_claimed_in_each_level() -> None:
    heads = Heads()
    heads.landed(NO_HEADS, [job(1, 0), job(2, 1), job(3, 0, priority=4)], walked=WALKED,
                 limit=LIMIT, now=0.0)  # fmt: skip
    sent = heads.send(now=1.0)
    assert dict(sent.heads) == {("default", 0): (T0 + timedelta(seconds=1), 2),
                                ("default", 4): (T0, 3)}  # fmt: skip
    assert [h["id"] for h in json.loads(sent.params()["heads"])] == [2, 3]
    # A job behind a head (claimed by a rescan) does not move it back.
    heads.landed(heads.send(now=9.0), [job(0, -60)], walked=WALKED, limit=LIMIT, now=9.0)
    assert dict(heads.send(now=9.5).heads)[("default", 0)] == (T0 + timedelta(seconds=1), 2)


def test_a_rescan_that_claims_a_full_batch_behind_the_heads_is_followed_by_another() -> None:
    heads = Heads(rescan_every=5.0)
    heads.landed(NO_HEADS, [job(100, 100)], walked=WALKED, limit=LIMIT, now=0.0)
    rescan = heads.send(now=5.0)
    assert rescan.rescan
    behind = [job(i, i) for i in range(LIMIT)]
    heads.landed(rescan, behind, walked=WALKED, limit=LIMIT, now=5.0)
    assert heads.send(now=5.0).rescan
    heads.landed(heads.send(now=5.0), behind[:3], walked=WALKED, limit=LIMIT, now=5.0)
    assert not heads.send(now=9.9).rescan and heads.send(now=10.0).rescan


def test_an_empty_claim_with_heads_can_ask_for_a_rescan() -> None:
    heads = Heads()
    heads.landed(NO_HEADS, [job(1)], walked=WALKED, limit=LIMIT, now=0.0)
    assert heads.send(now=0.1).heads
    heads.rescan_next()
    assert heads.send(now=0.1).rescan
