"""Scenario 10: recovery after a crash (issue 17's drill), timed.

A worker process runs a batch of 100 jobs at once, one of them poison
(where it runs to the end, its handler calls ``os._exit``), and is
SIGKILLed while all 100 are running; two other worker processes serve a
queue that never runs dry meanwhile. The 100 jobs are orphans once a
survivor's reaper returns them: each runs alone, one after another. Every
innocent one must have succeeded within 2 x the visibility timeout + 30 s
of the kill; the poison job kills a survivor each time it runs (the test
restarts it, as a supervisor would) and ends ``dead`` after its
``max_attempts``; no innocent job is buried and nothing is lost.

The handlers are in recovery_app.py: in the victim (``REL_HOLD=1``) the
held jobs count their execution and then block until the process dies.

The test prints (``-s``) the seconds from the kill to the reap, to the
first and last run of an orphan, to the last innocent job's success and to
the poison job's burial; ``PGQUEUE_RELIABILITY_REPORT`` records them too
(docs/reliability.md, "Recovery after a crash").
"""

from __future__ import annotations

import re
import signal
import time
from dataclasses import dataclass, field

import pytest

import pgqueue
from pgqueue import JobSpec
from pgqueue.core.jobs import LEASE_EXPIRED

from .conftest import FLAVOURS, Fleet, Report, Worker
from .test_crash import held_by

# Seconds of visibility timeout: short, to keep the drill short (the bound
# is 2 x LEASE + 30 s), yet a heartbeat every 1.25 s keeps a living
# worker's lease on a busy machine.
LEASE = 5.0
BOUND = 2 * LEASE + 30
HELD = 100  # the victim's batch, all running when it is killed
POISON_AT = 50  # the poison job's place in that batch
MAX_ATTEMPTS = 3  # every held job's: the victim's run is the first
BACKLOG = 1_000  # busy jobs kept pending: the survivors never run dry
SURVIVORS = 2
# A liveness deadline for the whole recovery, far beyond the bound, so that
# a slow recovery is measured and reported rather than cut short.
LIVENESS = 300.0

APP = {
    "sync": ["tests.reliability.recovery_app:worker"],
    "asyncio": ["tests.reliability.recovery_app:async_worker"],
    "trio": ["tests.reliability.recovery_app:async_worker", "--trio"],
}
RUNNING_ALONE = re.compile(
    r"job (\d+) \(\w+\): its last worker vanished holding it; running it alone"
)


@dataclass
class Load:
    """The busy load: ``busy`` jobs topped up to BACKLOG pending, so that the
    survivors' claims always find work."""

    fleet: Fleet
    queue: pgqueue.Queue
    ids: list[int] = field(default_factory=list)
    lowest: int | None = None  # the fewest pending seen since `watch`

    def top_up(self) -> None:
        pending = self.fleet.count("kind = 'busy' AND status = 'pending'")
        if self.lowest is not None:
            self.lowest = min(self.lowest, pending)
        if pending < BACKLOG:
            start = len(self.ids)
            self.ids += self.queue.enqueue_many(
                [("busy", i) for i in range(start, start + BACKLOG)]
            )

    def watch(self) -> None:
        self.lowest = BACKLOG


@dataclass
class Supervisor:
    """Restarts every survivor that dies; remembers how it died and what it held."""

    fleet: Fleet
    backend: str
    env: dict[str, str]
    workers: list[Worker] = field(default_factory=list)
    deaths: list[tuple[int | None, set[int]]] = field(default_factory=list)

    def start(self) -> None:
        self.workers.append(self.fleet.start(self.backend, **self.env))

    def check(self) -> None:
        for i, w in enumerate(self.workers):
            if not w.alive():
                self.deaths.append((w.proc.returncode, held_by(self.fleet, w.name)))
                assert len(self.deaths) < MAX_ATTEMPTS, (
                    f"more survivors died than the poison job has attempts left\n"
                    f"{self.fleet.output()}"
                )
                self.workers[i] = self.fleet.start(self.backend, **self.env)


def test_after_a_crash_innocent_jobs_recover_in_bounded_time_and_the_poison_job_dies(
    fleet: Fleet, backend: str, report: Report, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(FLAVOURS, backend, APP[backend])
    lease = {"REL_VISIBILITY_TIMEOUT": str(LEASE)}
    specs = [JobSpec("held", i, max_attempts=MAX_ATTEMPTS) for i in range(HELD)]
    specs[POISON_AT] = JobSpec("held_poison", POISON_AT, max_attempts=MAX_ATTEMPTS)
    with pgqueue.Queue(fleet.dsn, table=fleet.table) as q:
        held_ids = q.enqueue_many(specs)
        poison_id = held_ids[POISON_AT]
        innocent = [job_id for job_id in held_ids if job_id != poison_id]

        # The victim alone, for the held kinds only: one claim of all 100,
        # each handler started (its execution counted) and blocked.
        victim = fleet.start(
            backend,
            "--kinds",
            "held,held_poison",
            REL_HOLD="1",
            REL_CONCURRENCY=str(HELD),
            REL_BATCH_SIZE=str(HELD),
            **lease,
        )
        fleet.wait_until(
            lambda: (
                len(fleet.executions("pid = %s", victim.pid)) == HELD
                and held_by(fleet, victim.name) == set(held_ids)
            ),
            "the victim to run all the held jobs",
            alive=[victim],
        )

        # The survivors, busy before the kill and all the way through.
        load = Load(fleet, q)
        load.top_up()
        survivors = Supervisor(
            fleet, backend, {"REL_CONCURRENCY": "4", "REL_BATCH_SIZE": "50", **lease}
        )
        for _ in range(SURVIVORS):
            survivors.start()

        def survivors_busy() -> bool:
            load.top_up()
            return all(fleet.executions("pid = %s", w.pid) for w in survivors.workers)

        fleet.wait_until(survivors_busy, "the survivors to run jobs", alive=survivors.workers)

        victim.proc.send_signal(signal.SIGKILL)
        assert victim.proc.wait() == -signal.SIGKILL
        killed = time.monotonic()
        [(killed_at,)] = fleet.execute("SELECT clock_timestamp()")
        assert held_by(fleet, victim.name) == set(held_ids)

        # Recovery, watched every 50 ms: when the victim's jobs were returned
        # (reaped), when the last innocent one succeeded, when the poison job
        # was buried.
        load.watch()
        seen: dict[str, float] = {}
        while "innocent jobs done" not in seen or "poison job dead" not in seen:
            survivors.check()
            load.top_up()
            [(left, buried, victims, poison_status)] = fleet.execute(
                "SELECT count(*) FILTER (WHERE id = ANY(%s)),"
                " count(*) FILTER (WHERE id = ANY(%s) AND status = 'dead'),"
                " count(*) FILTER (WHERE status = 'running' AND locked_by = %s),"
                " max(status::text) FILTER (WHERE id = %s)"
                " FROM {table}",
                innocent,
                innocent,
                victim.name,
                poison_id,
            )
            after = time.monotonic() - killed
            assert buried == 0, f"an innocent job was buried\n{fleet.output()}"
            if victims == 0:
                seen.setdefault("reaped", after)
            if left == 0:
                seen.setdefault("innocent jobs done", after)
            if poison_status == "dead":
                seen.setdefault("poison job dead", after)
            if after > LIVENESS:
                pytest.fail(f"no recovery after {LIVENESS}s ({seen})\n{fleet.output()}")
            time.sleep(0.05)
        busy_throughout = load.lowest

        # The rest of the busy load drains; the survivors stop cleanly.
        def drained() -> bool:
            survivors.check()
            return fleet.count("id <> %s", poison_id) == 0

        fleet.wait_until(drained, "the busy load to drain")
        fleet.stop(*survivors.workers)

    [(first_orphan, last_orphan)] = fleet.execute(
        "SELECT extract(epoch FROM min(at) - %s), extract(epoch FROM max(at) - %s)"
        " FROM {executions} WHERE job_id = ANY(%s) AND pid <> %s",
        killed_at,
        killed_at,
        innocent,
        victim.pid,
    )
    output = fleet.output()
    measured = (
        f"{backend}: kill -> reaped {seen['reaped']:.1f}s, orphans ran "
        f"{float(first_orphan):.1f}s..{float(last_orphan):.1f}s, last innocent job done "
        f"{seen['innocent jobs done']:.1f}s, poison job dead {seen['poison job dead']:.1f}s "
        f"(visibility timeout {LEASE:g}s, bound {BOUND:g}s)"
    )
    print(measured)

    # Every innocent job succeeded in time, having run twice: in the victim,
    # then alone in a survivor.
    assert seen["innocent jobs done"] <= BOUND, f"{measured}\n{output}"
    executions = fleet.executions()
    assert {job_id: executions[job_id] for job_id in innocent} == dict.fromkeys(innocent, 2)
    # The poison job: once in the victim, then once in each of two survivors,
    # each of which it took down holding nothing else; then buried.
    [(status, attempts, last_error)] = fleet.execute(
        "SELECT status, attempts, last_error FROM {table}"
    )
    assert (status, attempts) == ("dead", MAX_ATTEMPTS)
    assert last_error.startswith(LEASE_EXPIRED)
    assert executions[poison_id] == MAX_ATTEMPTS
    assert survivors.deaths == [(3, {poison_id})] * (MAX_ATTEMPTS - 1), output
    assert "buried 1 jobs" in output
    # Each held job ran alone in a survivor (the poison job each time it ran).
    alone = sorted(int(job_id) for job_id in RUNNING_ALONE.findall(output))
    assert alone == sorted(innocent + [poison_id] * (MAX_ATTEMPTS - 1)), output
    # The survivors had work waiting the whole time; none of it was lost or repeated.
    assert busy_throughout is not None and busy_throughout > 0
    assert {job_id: executions[job_id] for job_id in load.ids} == dict.fromkeys(load.ids, 1)
    lost = (set(held_ids) | set(load.ids)) - set(executions)
    assert lost == set()

    report.add(
        "10. recovery after a crash",
        backend,
        load=f"100 running jobs (1 poison, all max_attempts=3) in 1 process x 100, "
        f"{len(load.ids):,} busy jobs on 2 processes x 4, restarted",
        faults="SIGKILL of the process running the 100; 2 deaths (the poison job's os._exit)",
        jobs=len(held_ids) + len(load.ids),
        lost=len(lost),
        duplicates=sum(n - 1 for n in executions.values()),
        visibility_timeout=LEASE,
        kill_to_reaped=round(seen["reaped"], 1),
        kill_to_innocent_done=round(seen["innocent jobs done"], 1),
        kill_to_poison_dead=round(seen["poison job dead"], 1),
    )
