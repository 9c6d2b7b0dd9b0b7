"""Scenario 18: a schedule's ticks through a worker SIGKILLed in its tick statement.

Four worker processes run the same two schedules (schedule_app.py): ``tick``
every second, and ``tick_solo`` every two seconds with ``overlap=False``,
whose jobs take longer than its interval. The victim (the backend under
test; the other three are one sync, one asyncio and one trio process) holds
every tick job it takes (``REL_HOLD=1``). Once it holds one, the test takes
the ``tick`` schedule's row lock half a second before a tick, waits until
every process's tick statement queues on it, and SIGKILLs the victim there
with its statement first in line: the one that gets the row when the lock
goes, and so records the tick and writes its job for a process that is
dead. (Which statement comes first is a matter of microseconds: if the
victim's is not, the test cancels the others', and their schedulers retry
and queue behind it.) Then it lets the row go. The survivors run several
more ticks, the victim's held jobs come back through their lease (3 s), and
the survivors stop; a worker without schedules runs what is left.

Then, from the queue's history and the handlers' count of their runs:

- ``tick``: exactly one job per tick, and no tick missing from the first to
  the last (three workers stayed alive, so no tick was left to the
  backfill), the killed one's tick included; the schedule's row ends at the
  last of them, naming its job.
- ``tick_solo``: at most one job per tick, ticks skipped (its jobs outlast
  its interval), and never two of its jobs at once: each started after the
  previous one's success was recorded.
- every job ran; only jobs the victim started ran twice.
"""

from __future__ import annotations

import itertools
import math
import signal
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import sql

from .conftest import FLAVOURS, Fleet, Report, Tally, Worker
from .test_crash import held_by

APP = {
    "sync": ["tests.reliability.schedule_app:worker"],
    "asyncio": ["tests.reliability.schedule_app:async_worker"],
    "trio": ["tests.reliability.schedule_app:async_worker", "--trio"],
}
LEASE = "3"  # seconds: the victim's held jobs come back soon
TICK = timedelta(seconds=1)  # schedule_app.TICK_EVERY
SOLO = timedelta(seconds=2)  # schedule_app.SOLO_EVERY
BEFORE_THE_KILL = 3  # ticks enqueued with every process alive, at least
AFTER_THE_KILL = 5  # ticks the survivors run after the killed one, at least
# What pg_stat_activity shows of the tick statement (its first line).
TICK_STATEMENT = "%WITH free AS MATERIALIZED%"


@dataclass(frozen=True)
class Kill:
    """Where the victim died: first in line in the statement of ``tick``."""

    tick: datetime
    cancelled: int  # the other workers' statements cancelled to put the victim's first
    backend_pid: int  # the server process running the victim's tick statement
    backend_xid: str | None  # its transaction
    held: dict[int, datetime]  # the jobs running under the victim's name, and their ticks
    writer_xid: str | None  # the transaction that recorded the tick (None: not seen)
    last_id: int  # the newest job of either schedule once the tick was recorded

    @property
    def victim_wrote_the_tick(self) -> bool:
        """The dead process's server process recorded the tick (and wrote its job)."""
        return self.backend_xid is not None and self.writer_xid == self.backend_xid


@dataclass(frozen=True)
class Waiting:
    """A tick statement waiting on a lock."""

    pid: int  # its server process
    first: bool  # first in line: it waits for the holder's transaction, the others behind it
    xid: str | None
    since: datetime


def db_now(fleet: Fleet) -> datetime:
    now: datetime = fleet.execute("SELECT clock_timestamp()")[0][0]
    return now


def last_tick(fleet: Fleet, name: str) -> tuple[datetime, int | None]:
    rows = fleet.execute(
        f"SELECT last_tick, last_job_id FROM {fleet.table}_schedules WHERE name = %s", name
    )
    return rows[0] if rows else (datetime.min.replace(tzinfo=UTC), None)


def tick_statements(fleet: Fleet) -> dict[str, Waiting]:
    """The tick statements waiting on a lock, by application name (one per worker)."""
    rows = fleet.execute(
        "SELECT application_name, pid, wait_event = 'transactionid', backend_xid::text,"
        " query_start FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
        TICK_STATEMENT,
    )
    return {name: Waiting(pid, first, xid, since) for name, pid, first, xid, since in rows}


def kill_in_the_tick_statement(fleet: Fleet, victim: Worker, workers: list[Worker]) -> Kill:
    """Hold the ``tick`` row over a tick until every worker's statement waits
    on it, the victim's first; SIGKILL the victim there; let the row go."""
    names = {w.application_name for w in workers}
    others = names - {victim.application_name}
    query = sql.SQL("SELECT clock_timestamp() FROM {} WHERE name = 'tick' FOR UPDATE").format(
        sql.Identifier(f"{fleet.table}_schedules")
    )
    with psycopg.connect(fleet.dsn) as holder:
        # Half a second before a tick (and never in the last moments before
        # one, when a statement for it may already be on its way).
        fleet.wait_until(
            lambda: 0.2 <= db_now(fleet).microsecond / 1e6 <= 0.6, "half a second to a tick"
        )
        [(now,)] = holder.execute(query).fetchall()
        tick = datetime.fromtimestamp(math.ceil(now.timestamp()), UTC)
        fleet.wait_until(
            lambda: names <= set(tick_statements(fleet)),
            "every worker's tick statement to wait on the row",
            alive=workers,
        )
        cancelled = 0
        if not tick_statements(fleet)[victim.application_name].first:
            # Whoever comes first is a matter of microseconds. Put the victim's
            # statement first: cancel the others, whose schedulers retry the
            # tick at once and queue behind it.
            since = db_now(fleet)
            for name, waiting in tick_statements(fleet).items():
                if name in others:
                    fleet.execute("SELECT pg_cancel_backend(%s)", waiting.pid)
                    cancelled += 1

            def victim_first_and_others_back() -> bool:
                waiting = tick_statements(fleet)
                return (
                    names <= set(waiting)
                    and waiting[victim.application_name].first
                    and all(waiting[name].since > since for name in others)
                )

            fleet.wait_until(
                victim_first_and_others_back,
                "the victim's tick statement first in line, the others behind it",
                alive=workers,
            )
        victim_statement = tick_statements(fleet)[victim.application_name]
        victim.proc.send_signal(signal.SIGKILL)
        assert victim.proc.wait() == -signal.SIGKILL
        # Its statements in flight end (all but the tick statement, which
        # waits on the row): then what it holds is settled. Their ticks are
        # read now, while the jobs still have them: the reaper makes the jobs
        # it returns due at once.
        fleet.wait_until(
            lambda: fleet.statements_running(victim) == 1, "the victim's statements to end"
        )
        held = dict(
            fleet.execute(
                "SELECT id, run_at FROM {table} WHERE status = 'running' AND locked_by = %s",
                victim.name,
            )
        )
        holder.rollback()  # the row goes to the victim's statement, first in line
    fleet.wait_until(lambda: last_tick(fleet, "tick")[0] >= tick, "the killed tick")
    # Which transaction moved the row to the tick (unless the next tick did already).
    [(writer, at, last_id)] = fleet.execute(
        f"SELECT xmin::text, last_tick, (SELECT max(last_job_id) FROM {fleet.table}_schedules)"
        f" FROM {fleet.table}_schedules WHERE name = 'tick'"
    )
    return Kill(
        tick,
        cancelled,
        victim_statement.pid,
        victim_statement.xid,
        held,
        writer if at == tick else None,
        last_id,
    )


def on_the_grid(moment: datetime, every: timedelta) -> bool:
    """A tick of ``every=...``: a multiple of it since the Unix epoch."""
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) % every == timedelta(0)


def test_each_tick_enqueues_exactly_one_job_through_a_worker_killed_in_its_tick_statement(
    fleet: Fleet, backend: str, report: Report, monkeypatch: pytest.MonkeyPatch
) -> None:
    for flavour, target in APP.items():
        monkeypatch.setitem(FLAVOURS, flavour, target)
    env = {"REL_VISIBILITY_TIMEOUT": LEASE, "REL_POLL_INTERVAL": "0.2"}
    victim = fleet.start(backend, REL_HOLD="1", **env)
    survivors = [fleet.start(b, **env) for b in ("sync", "asyncio", "trio")]
    workers = [victim, *survivors]

    # Every process ticking, and the victim holding a tick job.
    fleet.wait_until(
        lambda: (
            len(fleet.executions("pid <> %s", victim.pid)) >= BEFORE_THE_KILL
            and bool(held_by(fleet, victim.name))
        ),
        "ticks run, and a tick job held by the victim",
        alive=workers,
    )
    kill = kill_in_the_tick_statement(fleet, victim, workers)
    assert kill.held, "the victim held no job when it was killed"
    if kill.cancelled:  # the survivors' schedulers took it as a failed call, and retried
        assert "scheduler failed (canceling statement due to user request)" in fleet.output()

    # Several more ticks, the victim's jobs back through their lease and run,
    # and a job of tick_solo after them (the victim may hold its previous one).
    fleet.wait_until(
        lambda: (
            last_tick(fleet, "tick")[0] >= kill.tick + AFTER_THE_KILL * TICK
            and fleet.count("id = ANY(%s)", list(kill.held)) == 0
            and (last_tick(fleet, "tick_solo")[1] or 0) > kill.last_id
        ),
        "more ticks, the victim's jobs done, and tick_solo's next job",
        alive=survivors,
    )
    # Did the victim's own tick statement commit, its process dead? Its server
    # process ends once it writes to the closed socket.
    fleet.wait_until(
        lambda: not fleet.execute("SELECT FROM pg_stat_activity WHERE pid = %s", kill.backend_pid),
        "the victim's server process to end",
    )
    victim_statement = (
        fleet.execute("SELECT pg_xact_status(%s::xid8)", kill.backend_xid)[0][0]
        if kill.backend_xid is not None
        else None
    )
    fleet.stop(*survivors)
    # What the last ticks enqueued, run by a worker without schedules.
    drainer = fleet.start("sync", "--until-empty", REL_SCHEDULES="0", **env)
    fleet.wait_until(lambda: not drainer.alive(), "the drainer to run the last jobs")
    assert drainer.proc.returncode == 0, fleet.output()
    assert fleet.drained(), fleet.output()

    # Every job: each succeeded (the history), each ran (the executions).
    history = fleet.execute(f"SELECT id, kind, outcome, finished_at FROM {fleet.table}_history")
    assert {outcome for _, _, outcome, _ in history} == {"succeeded"}
    jobs = {job_id: kind for job_id, kind, _, _ in history}
    finished = {job_id: at for job_id, _, _, at in history}
    runs = fleet.execute("SELECT job_id, run_at, at, pid FROM {executions} ORDER BY at")
    tally = Tally(Counter(job_id for job_id, *_ in runs), frozenset(jobs))
    assert tally.lost == set()
    assert set(tally.executions) == set(jobs)
    started_by_victim = {job_id for job_id, _, _, pid in runs if pid == victim.pid}
    assert tally.duplicated <= started_by_victim
    assert kill.held.keys() & started_by_victim <= tally.duplicated  # the held ones ran again
    # Each job's tick: its run_at, as its runs saw it, but for the jobs the
    # reaper returned (due at once from then on): as they had it at the kill.
    run_at = {job_id: tick for job_id, tick, _, _ in runs} | kill.held
    first_run: dict[int, datetime] = {}
    for job_id, _, at, _ in runs:
        first_run.setdefault(job_id, at)

    by_kind: dict[str, list[tuple[datetime, int]]] = defaultdict(list)
    for job_id, kind in jobs.items():
        by_kind[kind].append((run_at[job_id], job_id))
    assert set(by_kind) == {"tick", "tick_solo"}
    for kind in by_kind:
        by_kind[kind].sort()

    # tick: one job per tick, every tick from the first to the last.
    ticks = [t for t, _ in by_kind["tick"]]
    per_tick = Counter(ticks)
    assert [t for t, n in per_tick.items() if n > 1] == []
    assert all(on_the_grid(t, TICK) for t in ticks), ticks
    gaps = [(a, b) for a, b in itertools.pairwise(ticks) if b - a != TICK]
    assert gaps == [], f"ticks missing between {gaps}\n{fleet.output()}"
    assert ticks[0] < kill.tick < ticks[-1]
    assert last_tick(fleet, "tick") == (ticks[-1], by_kind["tick"][-1][1])

    # tick_solo: at most one job per tick, ticks skipped, never two jobs at once.
    solo = by_kind["tick_solo"]
    solo_ticks = [t for t, _ in solo]
    assert [t for t, n in Counter(solo_ticks).items() if n > 1] == []
    assert all(on_the_grid(t, SOLO) for t in solo_ticks), solo_ticks
    assert len(solo) >= 2, solo
    # Its ticks, with and without a job, up to the last it recorded.
    solo_span = int((last_tick(fleet, "tick_solo")[0] - solo_ticks[0]) / SOLO) + 1
    assert len(solo) < solo_span, "no tick was skipped"
    assert "(overlap=False)" in fleet.output()
    for (_, before), (_, after) in itertools.pairwise(solo):
        assert first_run[after] > finished[before], (before, after)

    duplicate_tick_jobs = sum(n - 1 for n in per_tick.values()) + sum(
        n - 1 for n in Counter(solo_ticks).values()
    )
    wrote = ": its server process recorded the tick" if kill.victim_wrote_the_tick else ""
    cancelled = (
        f" ({kill.cancelled} others' statements cancelled to put it first)"
        if kill.cancelled
        else ""
    )
    held = f"{len(kill.held)} tick job" + ("s" if len(kill.held) != 1 else "")
    report.add(
        "18. schedule ticks through a worker SIGKILLed in its tick statement",
        backend,
        load=f"4 processes x 4 (killed: {backend}; survivors: sync, asyncio, trio), schedules"
        f" every 1 s and every 2 s (overlap=False): {len(ticks)} and {len(solo)} tick jobs",
        faults=f"SIGKILL of the process holding {held}, its tick statement first in line for"
        f" the schedule's row{wrote}{cancelled}",
        jobs=len(jobs),
        lost=len(tally.lost),
        duplicates=tally.duplicates,
        ticks_with_two_jobs=duplicate_tick_jobs,
        ticks_missing=len(gaps),
        solo_ticks_skipped=solo_span - len(solo),
        victim_wrote_the_tick=kill.victim_wrote_the_tick,
        victim_statement=victim_statement,
        cancelled=kill.cancelled,
    )
    print(
        f"{backend}: {len(ticks)} ticks of 1 s, one job each; tick_solo {len(solo)} jobs in"
        f" {solo_span} ticks; {duplicate_tick_jobs} ticks with two jobs; {kill.cancelled}"
        f" statements cancelled; the victim's statement {victim_statement}, wrote the tick:"
        f" {kill.victim_wrote_the_tick}; held {sorted(kill.held)}; {tally.duplicates} runs again"
    )
