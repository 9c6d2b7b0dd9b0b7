"""Scenarios 11 to 16: what production does to a worker (issue 16), with recovery times.

Real ``pgqueue worker`` processes against the suite's server, some through
a TCP proxy that can go silent or refuse (`tests.reliability.proxy`), some
under a login role a DBA configured:

11. LISTEN refused at start-up (its role is allowed no connection).
12. Started while the database refuses connections, for longer than 30 s.
13. Half-open connections: every open connection goes silent, new ones work.
14. SIGTERM while the database is unreachable.
15. A role ``statement_timeout`` of 10 ms, a big table, a worker SIGKILLed
    (test_statement_timeout.py).
16. An ``async def`` handler that blocks the event loop past a third of the lease.

Each test measures how long recovery took and checks it against a bound
stated in docs/reliability.md: a liveness deadline, never a speed target.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgqueue.core.worker import ABORT_FLUSH, CLAIM_CUT, FLUSH_DEADLINE
from pgqueue.sync.driver import RECONNECT_TIMEOUT

from ..conftest import SELECTED
from .conftest import Fleet, Report, Worker
from .proxy import Proxy


@dataclass(frozen=True)
class Role:
    """A login role with a worker's grants on the fleet's queue."""

    name: str
    dsn: str


def _role_sql(fleet: Fleet, statement: str, role: str) -> None:
    fleet.raw.conn.execute(
        sql.SQL(statement).format(
            role=sql.Identifier(role),
            table=sql.Identifier(fleet.table),
            sequence=sql.Identifier(f"{fleet.table}_id_seq"),
            queues=sql.Identifier(f"{fleet.table}_queues"),
            leases=sql.Identifier(f"{fleet.table}_unique_leases"),
            schedules=sql.Identifier(f"{fleet.table}_schedules"),
            results=sql.Identifier(f"{fleet.table}_results"),
            limits=sql.Identifier(f"{fleet.table}_limits"),
            slots=sql.Identifier(f"{fleet.table}_limit_slots"),
            dependencies=sql.Identifier(f"{fleet.table}_dependencies"),
        )
    )


@pytest.fixture
def roles(fleet: Fleet) -> Iterator[Callable[..., Role]]:
    """Makes login roles with a worker's grants; ``ALTER ROLE`` settings as keywords."""
    made: list[str] = []

    def make(**settings: str) -> Role:
        name = f"pgqueue_prod_{uuid.uuid4().hex[:8]}"
        made.append(name)
        _role_sql(fleet, "CREATE ROLE {role} LOGIN", name)
        _role_sql(fleet, "GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {role}", name)
        _role_sql(fleet, "GRANT USAGE ON SEQUENCE {sequence} TO {role}", name)
        grant = "GRANT SELECT, INSERT, UPDATE, DELETE ON {queues}, {leases}, {schedules} TO {role}"
        _role_sql(fleet, grant, name)
        grant = (
            "GRANT SELECT, INSERT, UPDATE, DELETE ON {results}, {limits}, {slots}, {dependencies}"
            " TO {role}"
        )
        _role_sql(fleet, grant, name)
        for setting, value in settings.items():
            _role_sql(fleet, f"ALTER ROLE {{role}} SET {setting} = '{value}'", name)
        return Role(name, make_conninfo(fleet.dsn, user=name))

    yield make
    for name in made:
        _role_sql(fleet, "DROP OWNED BY {role}", name)
        _role_sql(fleet, "DROP ROLE {role}", name)


@pytest.fixture
def proxy(fleet: Fleet) -> Iterator[Proxy]:
    with Proxy(fleet.dsn) as p:
        yield p


def only(*backends: str) -> pytest.MarkDecorator:
    """Run on these backends (of those selected) only."""
    return pytest.mark.parametrize("backend", [b for b in backends if b in SELECTED])


def since(start: float) -> float:
    return round(time.monotonic() - start, 1)


def timed_wait(
    fleet: Fleet,
    condition: Callable[[], bool],
    what: str,
    *,
    within: float,
    alive: list[Worker] | None = None,
) -> float:
    """Poll ``condition`` until it holds, for at most ``within`` seconds (the
    scenario's stated bound); return the seconds it took."""
    start = time.monotonic()
    while not condition():
        for w in alive or []:
            if not w.alive():
                pytest.fail(f"{w.name} exited ({w.proc.returncode}) before {what}\n"
                            f"{fleet.output()}")  # fmt: skip
        if time.monotonic() - start > within:
            pytest.fail(f"no {what} within {within}s\n{fleet.output()}")
        time.sleep(0.05)
    return since(start)


def logged(worker: Worker, text: str) -> Callable[[], bool]:
    return lambda: text in worker.output()


def exit_within(fleet: Fleet, worker: Worker, seconds: float) -> float:
    """Wait for ``worker`` to exit 0 at most ``seconds``; return how long it took."""
    start = time.monotonic()
    try:
        code = worker.proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pytest.fail(f"worker {worker.name} still running {seconds}s on\n{fleet.output()}")
    assert code == 0, f"worker {worker.name} exited {code}\n{fleet.output()}"
    return since(start)


def lines_with(worker: Worker, text: str) -> list[str]:
    return [line for line in worker.output().splitlines() if text in line]


# -- 11. LISTEN refused at start-up ---------------------------------------------------------

# How long a stop of an idle worker may take: no job to wait for, nothing to write.
IDLE_STOP_BOUND = 15.0
# The listener retries with the worker's backoff, capped at 10 s (+50% jitter).
LISTEN_BACK_BOUND = 30.0
REFUSALS = 5


def test_worker_whose_listen_is_refused_polls_from_the_start_and_listens_once_allowed(
    fleet: Fleet, backend: str, roles: Callable[..., Role], report: Report
) -> None:
    # LISTEN connects as a role allowed no connection ("too many connections
    # for role"); the queue's pool as another. (One role allowed one
    # connection, as the issue has it, is a race: whichever of the pool and
    # the listener connects first holds it; see docs/reliability.md.)
    listener = roles()
    _role_sql(fleet, "ALTER ROLE {role} CONNECTION LIMIT 0", listener.name)
    ids = fleet.enqueue(20)
    started = time.monotonic()
    worker = fleet.start(backend, dsn=roles().dsn, REL_LISTEN_DSN=listener.dsn,
                         REL_POLL_INTERVAL="0.5")  # fmt: skip
    fleet.wait_until(lambda: fleet.executed() > 0, "a first job", alive=[worker])
    first_job = since(started)
    fleet.wait_until(fleet.drained, "the jobs enqueued before start", alive=[worker])
    fleet.wait_until(logged(worker, "polling meanwhile"), "the listener's failure logged")
    assert "too many connections for role" in worker.output()
    assert fleet.listeners() == 0
    # Jobs enqueued now wait for the poll: no notification can reach the worker.
    ids += fleet.enqueue(20, start=20)
    fleet.wait_until(fleet.drained, "jobs enqueued while LISTEN is refused", alive=[worker])
    # Refused a few times over, the listener's backoff has grown (0.1 s doubling).
    fleet.wait_until(lambda: len(lines_with(worker, "listener lost")) >= REFUSALS,
                     f"{REFUSALS} refused LISTENs", alive=[worker])  # fmt: skip

    _role_sql(fleet, "ALTER ROLE {role} CONNECTION LIMIT 1", listener.name)
    listen_back = timed_wait(fleet, lambda: fleet.listeners() == 1, "LISTEN",
                             within=LISTEN_BACK_BOUND, alive=[worker])  # fmt: skip
    ids += fleet.enqueue(20, start=40)
    fleet.wait_until(fleet.drained, "jobs enqueued once LISTEN is back", alive=[worker])

    worker.proc.send_signal(signal.SIGTERM)
    stopped = exit_within(fleet, worker, IDLE_STOP_BOUND)
    tally = fleet.tally(ids)
    assert tally.lost == set()
    assert tally.duplicated == set()
    line = lines_with(worker, "polling meanwhile")[0]
    report.add(
        "11. LISTEN refused at start-up",
        backend,
        load=f"{len(ids)} jobs in 3 rounds, 1 process x 4",
        faults="LISTEN's role at CONNECTION LIMIT 0, raised to 1 after 2 rounds",
        jobs=len(ids),
        lost=len(tally.lost),
        duplicates=tally.duplicates,
        first_job_s=first_job,
        listen_back_s=listen_back,
        stop_s=stopped,
        recovery=f"first job {first_job} s after start; LISTEN back {listen_back} s after the "
        f"limit was raised; stopped {stopped} s after SIGTERM",
        bound=f"LISTEN back within {LISTEN_BACK_BOUND:.0f} s; stop within {IDLE_STOP_BOUND:.0f} s",
        log_line=line.split(": ", 1)[-1],
    )


# -- 12. started while the database refuses connections -------------------------------------

BACKENDS = ("sync", "asyncio", "trio")
# Longer than psycopg_pool's 30 s wait for a connection, which once ended a start.
REFUSED_FOR = 35.0
# From the first connection the proxy accepts to a worker's first job: the
# pool tries to connect every one or two seconds however long the outage
# (RECONNECT_TIMEOUT), the claim waiting for a connection takes the first;
# 10 s of slack for a busy machine.
FIRST_JOB_BOUND = 2 * RECONNECT_TIMEOUT + 10.0
GRACE = 5.0
# A stop while every connection is refused, with no job running: the claim
# waiting for a connection is given up after CLAIM_CUT, whatever the grace
# period (the quitters keep the default 30 s, longer than the bound), and
# some slack for a busy machine and the process's own exit.
QUITTER_GRACE = 30.0
REFUSED_STOP_BOUND = CLAIM_CUT + 10.0
RETRY_LINE = re.compile(r"claim failed \(.*\); retrying in [\d.]+s")


def executed_by(fleet: Fleet, worker: Worker) -> bool:
    return bool(fleet.execute("SELECT 1 FROM {executions} WHERE pid = %s LIMIT 1", worker.pid))


def exits(
    fleet: Fleet, workers: dict[str, Worker], since_: float, bound: float
) -> dict[str, float]:
    """Wait for every worker to exit 0, at most ``bound`` seconds after
    ``since_``; return the seconds each took."""
    took: dict[str, float] = {}

    def all_exited() -> bool:
        for key, w in workers.items():
            if key not in took and not w.alive():
                took[key] = since(since_)
                assert w.proc.returncode == 0, f"{w.name} exited {w.proc.returncode}"
        assert time.monotonic() - since_ < bound, f"still running after {bound}s: " + ", ".join(
            w.name for key, w in workers.items() if key not in took
        )
        return len(took) == len(workers)

    fleet.wait_until(all_exited, "the workers to exit")
    return took


def test_workers_started_while_the_database_refuses_connections_work_once_it_accepts(
    fleet: Fleet, proxy: Proxy, report: Report
) -> None:
    proxy.refuse()
    ids = fleet.enqueue(30, "sleep")
    env = {"REL_CONCURRENCY": "1", "REL_BATCH_SIZE": "1", "REL_POLL_INTERVAL": "0.5",
           "REL_GRACE_PERIOD": str(GRACE)}  # fmt: skip
    started = time.monotonic()
    workers = {b: fleet.start(b, dsn=proxy.dsn(), **env) for b in BACKENDS}
    quitting = {**env, "REL_GRACE_PERIOD": str(QUITTER_GRACE)}
    quitters = {b: fleet.start(b, dsn=proxy.dsn(), **quitting) for b in BACKENDS}

    # A SIGTERM while every connection is refused, once the claim is seen stuck.
    for w in quitters.values():
        fleet.wait_until(logged(w, "claim waiting on the database"), "a stuck claim", alive=[w])
    signalled = time.monotonic()
    for w in quitters.values():
        w.proc.send_signal(signal.SIGTERM)
    stops = exits(fleet, quitters, signalled, REFUSED_STOP_BOUND)

    def refused_long_enough() -> bool:
        return time.monotonic() - started >= REFUSED_FOR and all(
            RETRY_LINE.search(w.output()) for w in workers.values()
        )

    alive = list(workers.values())
    fleet.wait_until(refused_long_enough, f"{REFUSED_FOR}s of refusals", alive=alive)
    assert fleet.executed() == 0
    refused = since(started)
    proxy.refuse(False)
    accepted = time.monotonic()
    first_job: dict[str, float] = {}

    def each_ran_one() -> bool:
        for b, w in workers.items():
            if b not in first_job and executed_by(fleet, w):
                first_job[b] = since(accepted)
        if fleet.count("status = 'pending'") < 5:  # work for whoever comes late
            ids.extend(fleet.enqueue(10, "sleep", start=len(ids)))
        return len(first_job) == len(workers)

    fleet.wait_until(each_ran_one, "every worker's first job", alive=alive)
    fleet.wait_until(fleet.drained, "every job to succeed", alive=alive)
    fleet.stop(*alive)

    tally = fleet.tally(ids)
    assert tally.lost == set()
    for b, w in workers.items():
        assert first_job[b] < FIRST_JOB_BOUND, (b, first_job)
        assert "PoolClosed" not in w.output()
        match = RETRY_LINE.search(w.output())
        assert match is not None
        report.add(
            "12. started while the database refuses connections",
            b,
            load=f"{len(ids)} jobs, 1 process x 1 (+1 stopped while refused)",
            faults=f"every connection refused for {refused:.0f}s from start (the proxy)",
            jobs=len(ids),
            lost=len(tally.lost),
            duplicates=tally.duplicates,
            first_job_s=first_job[b],
            refused_stop_s=stops[b],
            recovery=f"first job {first_job[b]} s after the database accepted; the one "
            f"stopped while refused exited {stops[b]} s after SIGTERM",
            bound=f"first job within {FIRST_JOB_BOUND:.0f} s; stop within "
            f"{REFUSED_STOP_BOUND:.0f} s",
            log_line=match.group(0),
        )


# -- 13. half-open connections --------------------------------------------------------------

# TCP options small enough for a test (the defaults are 30 s, 10 s, 3 and 60 s).
KEEPALIVES = {"keepalives_idle": "1", "keepalives_interval": "1", "keepalives_count": "2",
              "tcp_user_timeout": "3000"}  # fmt: skip
CALL_TIMEOUT = 5.0
HALF_OPEN_LEASE = 10.0
# Every call on a silent connection gives up after CALL_TIMEOUT; a claim
# whose answer was lost comes back through the lease (reaped, then run
# alone); 30 s of slack on a busy machine.
HALF_OPEN_BOUND = CALL_TIMEOUT + 2 * HALF_OPEN_LEASE + 30.0
BATCH = 10


def test_half_open_connections_cost_a_call_timeout_and_lose_no_job(
    fleet: Fleet, backend: str, proxy: Proxy, report: Report
) -> None:
    ids = fleet.enqueue(1_000)
    env = {
        "REL_CALL_TIMEOUT": str(CALL_TIMEOUT),
        "REL_VISIBILITY_TIMEOUT": str(HALF_OPEN_LEASE),
        "REL_CONCURRENCY": "4",
        "REL_BATCH_SIZE": str(BATCH),
        "REL_POLL_INTERVAL": "0.5",
    }
    worker = fleet.start(backend, dsn=proxy.dsn(**KEEPALIVES), **env)
    fleet.wait_until(lambda: fleet.listeners() == 1, "the listener", alive=[worker])
    fleet.wait_until(lambda: fleet.executed() >= 200, "a drain under way", alive=[worker])
    silenced = proxy.freeze()
    before = fleet.executed()
    # A worker holds at most two batches: an execution past those needs a
    # claim made after the freeze.
    resumed = timed_wait(
        fleet,
        lambda: fleet.executed() > before + 2 * BATCH,
        "claim after the freeze",
        within=HALF_OPEN_BOUND,
        alive=[worker],
    )
    rest = timed_wait(fleet, fleet.drained, "drain", within=HALF_OPEN_BOUND, alive=[worker])
    assert silenced >= 2  # the listener's and the pool's
    # Its listener is still silent (no keepalive reaches through a live
    # proxy): the worker polls, and a SIGTERM stops it.
    worker.proc.send_signal(signal.SIGTERM)
    stopped = exit_within(fleet, worker, IDLE_STOP_BOUND)
    tally = fleet.tally(ids)
    assert tally.lost == set()
    line = lines_with(worker, "failed (")[0]
    report.add(
        "13. half-open connections",
        backend,
        load=f"{len(ids):,} jobs, 1 process x 4",
        faults=f"{silenced} connections silenced mid-drain (the proxy), new ones forwarded",
        jobs=len(ids),
        lost=len(tally.lost),
        duplicates=tally.duplicates,
        resumed_s=resumed,
        drained_s=round(resumed + rest, 1),
        stop_s=stopped,
        recovery=f"a claim made after the freeze ran {resumed} s after it; drained "
        f"{round(resumed + rest, 1)} s after it; stopped {stopped} s after SIGTERM",
        bound=f"each within {HALF_OPEN_BOUND:.0f} s (call_timeout {CALL_TIMEOUT:.0f} s + "
        f"2 leases of {HALF_OPEN_LEASE:.0f} s + 30 s)",
        log_line=line.split(": ", 1)[-1],
    )


# -- 14. SIGTERM while the database is unreachable ------------------------------------------

STOP_GRACE = 2.0
STOP_LEASE = 5.0
# run() returns after the grace period and at most FLUSH_DEADLINE of trying
# to write; 10 s of slack for a busy machine and the process's own exit.
UNREACHABLE_STOP_BOUND = STOP_GRACE + FLUSH_DEADLINE + 10.0
# A second SIGTERM: the jobs are interrupted at once; the outcomes then get
# at most ABORT_FLUSH.
SECOND_SIGNAL_BOUND = ABORT_FLUSH + 10.0
# Jobs whose outcome was never written run again once their lease expires
# and a reaper returns them (one reap interval, lease / 2), one by one.
COME_BACK_BOUND = 2 * STOP_LEASE + 30.0
GAVE_UP = re.compile(r"gave up writing (\d+) outcomes after [\d.]+s; those jobs come back when "
                     r"their lease expires: (.*)")  # fmt: skip
LONG_JOB = {"seconds": 60, "retry_seconds": 0}  # runs long the first time only


def ids_named(line: str) -> set[int]:
    """The job ids of a log line's ``12 (sleep), 13 (sleep)``."""
    return {int(m) for m in re.findall(r"(\d+) \(\w+\)", line)}


def test_sigterm_while_the_database_is_unreachable_stops_in_bounded_time_and_loses_nothing(
    fleet: Fleet, backend: str, report: Report
) -> None:
    env = {"REL_GRACE_PERIOD": str(STOP_GRACE), "REL_VISIBILITY_TIMEOUT": str(STOP_LEASE),
           "REL_CONCURRENCY": "2", "REL_BATCH_SIZE": "1", "REL_CALL_TIMEOUT": "5"}  # fmt: skip
    with Proxy(fleet.dsn) as to_a, Proxy(fleet.dsn) as to_b:
        # A runs two long jobs; the database becomes unreachable; one SIGTERM.
        ids = fleet.enqueue_specs([("sleep", LONG_JOB)] * 2)
        a = fleet.start(backend, dsn=to_a.dsn(), **env)
        fleet.wait_until(lambda: len(fleet.executions("pid = %s", a.pid)) == 2, "A's jobs",
                         alive=[a])  # fmt: skip
        held_by_a = set(fleet.executions("pid = %s", a.pid))
        to_a.unreachable()
        a.proc.send_signal(signal.SIGTERM)
        signalled_a = time.monotonic()

        # B the same (A cannot claim its jobs: it is cut off), then two SIGTERMs.
        ids += fleet.enqueue_specs([("sleep", LONG_JOB)] * 2)
        b = fleet.start(backend, dsn=to_b.dsn(), **env)
        fleet.wait_until(lambda: len(fleet.executions("pid = %s", b.pid)) == 2, "B's jobs",
                         alive=[b])  # fmt: skip
        to_b.unreachable()
        b.proc.send_signal(signal.SIGTERM)
        fleet.wait_until(logged(b, "stopping gracefully"), "B's first SIGTERM", alive=[b])
        b.proc.send_signal(signal.SIGTERM)
        second = exits(fleet, {"b": b}, time.monotonic(), SECOND_SIGNAL_BOUND)["b"]
        first = exits(fleet, {"a": a}, signalled_a, UNREACHABLE_STOP_BOUND)["a"]
        # The network path closes: the server's side of every connection ends.
    closed = time.monotonic()

    match = GAVE_UP.search(a.output())
    assert match is not None, a.output()
    assert ids_named(match.group(2)) == held_by_a
    assert "not waiting for running jobs" in b.output()

    c = fleet.start(backend, **env)
    timed_wait(fleet, fleet.drained, "every job to succeed", within=COME_BACK_BOUND, alive=[c])
    back = since(closed)  # from the last stop, a new worker's start included
    fleet.stop(c)
    tally = fleet.tally(ids)
    assert tally.lost == set()
    assert tally.duplicated == set(ids)  # each ran again, after its lease
    assert "reaped" in c.output()
    report.add(
        "14. SIGTERM while the database is unreachable",
        backend,
        load=f"{len(ids)} jobs of 60 s, 2 processes x 2, then 1 to recover",
        faults="connections silenced and new ones refused (the proxy), then SIGTERM; "
        "SIGTERM twice for the second process",
        jobs=len(ids),
        lost=len(tally.lost),
        duplicates=tally.duplicates,
        stop_s=first,
        second_signal_stop_s=second,
        back_s=back,
        recovery=f"run() returned {first} s after SIGTERM (grace {STOP_GRACE:.0f} s + flush); "
        f"{second} s after a second SIGTERM; the jobs ran again {back} s after the processes "
        "were gone",
        bound=f"{UNREACHABLE_STOP_BOUND:.0f} s; {SECOND_SIGNAL_BOUND:.0f} s; "
        f"{COME_BACK_BOUND:.0f} s",
        log_line=match.group(0),
    )


# -- 16. a blocked event loop ---------------------------------------------------------------

BLOCK_LEASE = 6.0
# More than a third of the lease, so the heartbeat comes late by more than
# that (at least 4 s - 6 s / 4); less than the lease, so the worker's own
# reaper leaves the job alone. (Blocked past the lease, the worker may claim
# its own running job as an orphan and crash: docs/reliability.md, "Known gaps".)
BLOCKED_FOR = 4.0
BLOCKED = re.compile(r"the event loop was blocked for about ([\d.]+)s \(heartbeat late\).* "
                     r"Running: (.*)")  # fmt: skip
# The warning comes with the first heartbeat after the loop is free again.
BLOCK_WARNING_BOUND = BLOCKED_FOR + 30.0


def logged_at(line: str) -> datetime:
    """The time of a log line of the worker (its local time)."""
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")


@only("asyncio", "trio")
def test_a_handler_that_blocks_the_event_loop_is_named_in_a_warning(
    fleet: Fleet, backend: str, report: Report
) -> None:
    env = {"REL_VISIBILITY_TIMEOUT": str(BLOCK_LEASE), "REL_POLL_INTERVAL": "0.2"}
    worker = fleet.start(backend, **env)
    # It blocks, then awaits: still running when the loop is free again. (One
    # that returns straight after blocking is over by then, and the warning
    # says "Running: none": see docs/reliability.md, "Known gaps".)
    payload = {"seconds": BLOCKED_FOR, "retry_seconds": 0, "then_await": 1}
    [job_id] = fleet.enqueue_specs([("block", payload)])
    warned = timed_wait(fleet, lambda: BLOCKED.search(worker.output()) is not None,
                        "the warning", within=BLOCK_WARNING_BOUND, alive=[worker])  # fmt: skip
    fleet.wait_until(fleet.drained, "the job to succeed", alive=[worker])
    fleet.stop(worker)

    [line] = [ln for ln in worker.output().splitlines() if BLOCKED.search(ln)]
    match = BLOCKED.search(line)
    assert match is not None
    assert job_id in ids_named(match.group(2))
    assert float(match.group(1)) >= BLOCK_LEASE / 3
    [(started,)] = fleet.execute("SELECT min(at) FROM {executions} WHERE job_id = %s", job_id)
    # When the warning came, counted from the start of the blocking handler.
    after = (logged_at(line) - started.astimezone().replace(tzinfo=None)).total_seconds()
    tally = fleet.tally([job_id])
    assert tally.lost == set()
    report.add(
        "16. an async handler blocks the event loop",
        backend,
        load=f"1 job whose async def handler calls time.sleep({BLOCKED_FOR:.0f}), then awaits; "
        f"lease {BLOCK_LEASE:.0f} s",
        faults=f"the event loop blocked {BLOCKED_FOR:.0f} s",
        jobs=1,
        lost=0,
        duplicates=tally.duplicates,
        blocked_s=float(match.group(1)),
        warned_after_s=round(after, 1),
        waited_s=warned,
        recovery=f"warned {round(after, 1)} s after the handler began to block (the heartbeat "
        f"{match.group(1)} s late)",
        bound=f"warning within {BLOCK_WARNING_BOUND:.0f} s",
        log_line=line.split(": ", 1)[-1],
    )
