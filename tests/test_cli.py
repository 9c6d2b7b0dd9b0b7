"""The ``pgqueue`` command, run as a user runs it: in processes of its own.

The workers come from `tests.cli_app`, configured through the environment;
their handlers record each start and finish in ``<table>_runs``, so what a
process did is read back from the database, even after it was killed.
Waits poll the database against a generous deadline: they check that
something happens at all, never how fast.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

import pgqueue
from pgqueue import cli

from .conftest import Raw

ROOT = Path(__file__).resolve().parent.parent
PATIENCE = 60.0  # seconds: a liveness deadline, never a performance claim
UNREACHABLE_DSN = "postgresql://nobody@127.0.0.1:1/nothing?connect_timeout=1"

# How each flavour of worker is named on the command line.
FLAVOURS = {
    "sync": ["tests.cli_app:worker"],
    "asyncio": ["tests.cli_app:async_worker"],
    "trio": ["tests.cli_app:async_worker", "--trio"],
}


class App:
    """The queue under test, its runs and release tables, and the workers' environment."""

    def __init__(self, dsn: str, table: str, raw: Raw, tmp_path: Path) -> None:
        self.dsn = dsn
        self.table = table
        self.raw = raw
        self.tmp_path = tmp_path
        self.env = {**os.environ, "PGQUEUE_DSN": dsn, "PGQUEUE_TABLE": table}
        self.runs = sql.Identifier(f"{table}_runs")
        self.release_table = sql.Identifier(f"{table}_release")
        self.processes = 0

    def execute(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        composed = sql.SQL(query).format(runs=self.runs, release=self.release_table)
        cur = self.raw.conn.execute(composed, params or None)
        return cur.fetchall() if cur.description else []

    def runs_of(self, event: str) -> Counter[int]:
        """How many times each job's handler reached ``event`` (start or finish)."""
        rows = self.execute("SELECT job_id FROM {runs} WHERE event = %s", event)
        return Counter(job_id for (job_id,) in rows)

    def release(self) -> None:
        """Let every ``block`` job, running or to come, finish."""
        self.execute("INSERT INTO {release} DEFAULT VALUES")

    @contextmanager
    def worker(self, *args: str, **env: str) -> Iterator[subprocess.Popen[bytes]]:
        """``pgqueue worker ARGS`` in a session of its own; killed on the way out."""
        self.processes += 1
        log = (self.tmp_path / f"worker-{self.processes}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgqueue", "worker", *args],
            cwd=ROOT,
            env={**self.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            log.close()

    def output(self) -> str:
        """Everything the worker processes printed so far."""
        logs = sorted(self.tmp_path.glob("worker-*.log"))
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')}" for p in logs)

    def wait_until(
        self, condition: Callable[[], bool], what: str, proc: subprocess.Popen[bytes] | None = None
    ) -> None:
        """Poll ``condition`` until it holds; fail if ``proc`` exits first or time runs out."""
        deadline = time.monotonic() + PATIENCE
        while not condition():
            if proc is not None and proc.poll() is not None:
                pytest.fail(f"the worker exited ({proc.returncode}) before {what}\n{self.output()}")
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}\n{self.output()}")
            time.sleep(0.05)

    def exit_code(self, proc: subprocess.Popen[bytes]) -> int:
        try:
            return proc.wait(timeout=PATIENCE)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the worker did not exit\n{self.output()}")


@pytest.fixture
def app(dsn: str, table: str, raw: Raw, tmp_path: Path) -> Iterator[App]:
    a = App(dsn, table, raw, tmp_path)
    with pgqueue.Queue(dsn, table=table) as q:
        q.install()
    a.execute(
        "CREATE TABLE {runs} (job_id bigint NOT NULL, attempts int NOT NULL, pid int NOT NULL,"
        " event text NOT NULL)"
    )
    a.execute("CREATE TABLE {release} ()")
    yield a
    a.execute("DROP TABLE IF EXISTS {runs}, {release}")


@pytest.fixture
def queue(dsn: str, table: str, app: App) -> Iterator[pgqueue.Queue]:
    with pgqueue.Queue(dsn, table=table) as q:
        yield q


def run_command(app: App, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pgqueue", *args],
        cwd=ROOT,
        env=app.env,
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=False,
    )


# -- the command line -------------------------------------------------------------


def test_console_script_is_the_cli_main() -> None:
    [script] = [e for e in importlib.metadata.entry_points(group="console_scripts")
                if e.name == "pgqueue"]  # fmt: skip
    assert script.load() is cli.main


def test_version_and_help_exit_zero(app: App) -> None:
    version = run_command(app, "--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"pgqueue {pgqueue.__version__}")
    helped = run_command(app, "worker", "--help")
    assert helped.returncode == 0
    for option in ("TARGET", "--dsn", "--concurrency", "--kinds", "--queues", "--until-empty",
                   "--trio"):  # fmt: skip
        assert option in helped.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "usage: pgqueue"),
        (["worker"], "the following arguments are required: TARGET"),
        (["worker", "tests.cli_app"], "TARGET must look like module:attribute"),
        (["worker", "tests.no_such_module:worker"], "no module named 'tests.no_such_module'"),
        (["worker", "tests.cli_app:no_such_worker"], "has no attribute 'no_such_worker'"),
        (["worker", "tests.cli_app:worker.nope"], "has no attribute 'worker.nope'"),
        (["worker", "tests.cli_app:queue"], "is a pgqueue.Queue, not a worker"),
        (["worker", "tests.cli_app:async_queue"], "is a pgqueue.AsyncQueue, not a worker"),
        (["worker", "tests.cli_app:HANDLERS"], "is a dict, not a pgqueue.Worker"),
        (
            ["worker", "tests.cli_app_broken:worker"],
            "importing 'tests.cli_app_broken' failed: KeyError: 'workers' (at ",
        ),
        (["worker", "pgqueue:Worker"], "is the class Worker"),
        (["worker", "tests.cli_app:worker", "--trio"], "--trio runs an AsyncWorker"),
        (["worker", "tests.cli_app:worker", "--concurrency", "0"], "must be at least 1"),
        (["worker", "tests.cli_app:worker", "--concurrency", "x"], "not an integer"),
        (["worker", "tests.cli_app:worker", "--kinds", ","], "name at least one kind"),
        (["worker", "tests.cli_app:worker", "--queues", ","], "name at least one queue"),
        (["worker", "tests.cli_app:worker", "--log-level", "loud"], "invalid choice"),
        (["worker", "tests.cli_app:worker", "--frobnicate"], "unrecognized arguments"),
        (["worker", "tests.cli_app:worker", "--metrics-port", "70000"], "not a port number"),
    ],
)
def test_bad_arguments_exit_2_with_a_message_and_no_traceback(
    app: App, args: list[str], message: str
) -> None:
    done = run_command(app, *args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "usage:" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


# -- a worker process -------------------------------------------------------------


@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_until_empty_worker_drains_only_its_kinds_and_exits_zero(
    app: App, queue: pgqueue.Queue, flavour: str
) -> None:
    mine = queue.enqueue_many([("noop", i) for i in range(30)])
    others = queue.enqueue_many([("block", i) for i in range(3)])
    args = ["--kinds", "noop", "--concurrency", "3", "--until-empty"]
    with app.worker(*FLAVOURS[flavour], *args) as proc:
        assert app.exit_code(proc) == 0, app.output()
    assert app.runs_of("finish") == Counter(mine)
    assert app.raw.count() == len(others)
    assert app.raw.count("kind = 'block' AND status = 'pending' AND attempts = 0") == 3
    assert "concurrency=3" in app.output()


@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_until_empty_worker_serves_only_the_queues_given(
    app: App, queue: pgqueue.Queue, flavour: str
) -> None:
    mine = queue.enqueue_many([pgqueue.JobSpec("noop", i, queue=q) for i in range(4)
                               for q in ("mail", "sms")])  # fmt: skip
    others = queue.enqueue_many([("noop", i) for i in range(3)])
    with app.worker(*FLAVOURS[flavour], "--queues", "mail,sms", "--until-empty") as proc:
        assert app.exit_code(proc) == 0, app.output()
    assert app.runs_of("finish") == Counter(mine)
    assert app.raw.count() == len(others)
    assert app.raw.count("queue = 'default' AND status = 'pending' AND attempts = 0") == 3
    assert "queues=['mail', 'sms']" in app.output()


@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_dsn_option_overrides_the_server_of_the_targets_queue(
    app: App, queue: pgqueue.Queue, flavour: str
) -> None:
    ids = queue.enqueue_many([("noop", i) for i in range(5)])
    # The module's own queue points at no server at all; --dsn wins.
    unreachable = {"PGQUEUE_DSN": UNREACHABLE_DSN, "CLI_APP_RUNS_DSN": app.dsn}
    with app.worker(*FLAVOURS[flavour], "--dsn", app.dsn, "--until-empty", **unreachable) as proc:
        assert app.exit_code(proc) == 0, app.output()
    assert app.runs_of("finish") == Counter(ids)
    assert app.raw.count() == 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_metrics_port_serves_the_workers_events_and_the_queues_stats(
    app: App, queue: pgqueue.Queue, flavour: str
) -> None:
    ids = queue.enqueue_many([("noop", i) for i in range(5)])
    port = free_port()
    labels = f'event="succeeded",kind="noop",queue="default",table="{app.table}"'
    succeeded = f"pgqueue_jobs_total{{{labels}}} 5.0"
    metrics = ""

    def scraped() -> bool:
        nonlocal metrics
        url = f"http://127.0.0.1:{port}/metrics"
        with urllib.request.urlopen(url, timeout=PATIENCE) as response:
            metrics = response.read().decode()
        return succeeded in metrics

    with app.worker(*FLAVOURS[flavour], "--metrics-port", str(port)) as proc:
        app.wait_until(lambda: app.runs_of("finish") == Counter(ids), "the jobs to run", proc)
        # Events follow the outcomes, which are recorded in batches after the handlers.
        app.wait_until(scraped, "5 successes in the metrics", proc)
        proc.send_signal(signal.SIGTERM)
        assert app.exit_code(proc) == 0, app.output()
    assert f'pgqueue_queue_up{{table="{app.table}"}} 1.0' in metrics
    assert f'pgqueue_queue_jobs{{status="pending",table="{app.table}"}} 0.0' in metrics
    assert f"serving Prometheus metrics on port {port}" in app.output()


def test_metrics_host_binds_the_metrics_to_one_address(app: App) -> None:
    # Every 127.x address is this machine's loopback: the metrics answer on
    # the one given, and nowhere else.
    port = free_port()

    def answers(host: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=PATIENCE):
                return True
        except OSError:
            return False

    args = ("tests.cli_app:worker", "--metrics-port", str(port), "--metrics-host", "127.0.0.2")
    with app.worker(*args) as proc:
        app.wait_until(lambda: answers("127.0.0.2"), "the metrics on 127.0.0.2", proc)
        assert not answers("127.0.0.1")
        proc.send_signal(signal.SIGTERM)
        assert app.exit_code(proc) == 0, app.output()
    assert f"serving Prometheus metrics on port {port} of 127.0.0.2" in app.output()


def test_metrics_port_refuses_a_module_that_registers_the_metrics_itself(app: App) -> None:
    port = str(free_port())
    done = run_command(app, "worker", "tests.cli_app_metered:worker", "--metrics-port", port)
    assert done.returncode == 2, done.stderr
    assert "already registers pgqueue's metrics" in done.stderr
    assert "Traceback" not in done.stderr


def test_metrics_port_in_use_exits_1_with_a_message(app: App) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_command(app, "worker", "tests.cli_app:worker", "--metrics-port", str(port))
    assert done.returncode == 1, done.stderr
    assert f"cannot serve metrics on port {port}" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("until_empty", [False, True], ids=["serving", "until-empty"])
@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_sigterm_releases_unstarted_jobs_at_once_and_lets_running_ones_finish(
    app: App, queue: pgqueue.Queue, raw: Raw, flavour: str, until_empty: bool
) -> None:
    # A quick job first: then the worker claims the whole batch, not only
    # one job per runner (`Pace`), and eight wait unstarted.
    queue.enqueue("quick")
    ids = queue.enqueue_many([("block", i) for i in range(10)])
    options = {"CLI_APP_CONCURRENCY": "2", "CLI_APP_BATCH_SIZE": "10"}
    mode = ["--until-empty"] if until_empty else []
    with app.worker(*FLAVOURS[flavour], *mode, **options) as proc:
        app.wait_until(lambda: sum(app.runs_of("start").values()) == 2, "two jobs start", proc)
        app.wait_until(lambda: raw.count("status = 'running'") == 10, "the batch claimed", proc)
        started = sorted(app.runs_of("start"))

        proc.send_signal(signal.SIGTERM)
        # The eight claimed but unstarted jobs go back at once, their attempt
        # given back, while the two running ones are still held.
        app.wait_until(
            lambda: raw.count("status = 'pending' AND attempts = 0") == 8, "the release", proc
        )
        assert raw.count("status = 'running'") == 2
        assert proc.poll() is None  # waiting for its running jobs

        app.release()
        assert app.exit_code(proc) == 0, app.output()

    assert app.runs_of("finish") == Counter(started)
    assert sorted(r[0] for r in raw.rows("SELECT id FROM {table}")) == sorted(
        set(ids) - set(started)
    )
    assert raw.count("status = 'pending' AND attempts = 0") == 8
    assert "SIGTERM" in app.output()


def test_second_sigterm_interrupts_running_jobs_and_returns_them_to_pending(
    app: App, queue: pgqueue.Queue, raw: Raw
) -> None:
    queue.enqueue("quick")  # then the worker claims a whole batch (`Pace`)
    queue.enqueue_many([("block", i) for i in range(4)])
    options = {"CLI_APP_CONCURRENCY": "2", "CLI_APP_BATCH_SIZE": "4"}
    with app.worker(*FLAVOURS["sync"], **options) as proc:
        app.wait_until(lambda: sum(app.runs_of("start").values()) == 2, "two jobs start", proc)
        proc.send_signal(signal.SIGTERM)
        app.wait_until(lambda: raw.count("status = 'running'") == 2, "the release", proc)
        proc.send_signal(signal.SIGTERM)
        # Interrupted: pending again at once, the attempt counted.
        app.wait_until(
            lambda: raw.count("status = 'pending' AND attempts = 1") == 2, "interruption", proc
        )
        # The handler threads cannot be killed; let them return so the process can end.
        app.release()
        assert app.exit_code(proc) == 0, app.output()
    interrupted = raw.rows("SELECT last_error FROM {table} WHERE attempts = 1")
    assert [e for (e,) in interrupted if "interrupted" in e] == [e for (e,) in interrupted]
    assert raw.count("status = 'pending'") == 4


def test_a_handler_still_running_at_exit_is_named_and_left_behind(
    app: App, queue: pgqueue.Queue, raw: Raw
) -> None:
    # A plain handler that does not return within the grace period: its job
    # is interrupted (pending again), and the process exits without its
    # thread, saying what it was doing.
    queue.enqueue("block")
    args = (*FLAVOURS["sync"], "--grace-period", "1")
    with app.worker(*args, CLI_APP_CONCURRENCY="1", CLI_APP_BATCH_SIZE="1") as proc:
        app.wait_until(lambda: sum(app.runs_of("start").values()) == 1, "the job starts", proc)
        proc.send_signal(signal.SIGTERM)
        assert app.exit_code(proc) == 0, app.output()
    app.release()
    assert "1 threads still busy at exit" in app.output()
    assert "(a handler still running)" in app.output() and "cli_app.py" in app.output()
    assert raw.count("status = 'pending' AND attempts = 1") == 1


def test_a_handler_waiting_on_a_query_of_its_own_is_named_as_a_handler(dsn: str) -> None:
    # What the command says of a thread it leaves at exit comes from the
    # thread's stack; a handler blocked inside psycopg (its own query) is
    # still the application's code, not a database call the worker gave up on.
    import psycopg

    from pgqueue.cli.worker import busy_with

    with psycopg.connect(dsn, autocommit=True) as conn:
        backend_pid = conn.info.backend_pid

        def handler() -> None:
            with contextlib.suppress(psycopg.Error):
                conn.execute("SELECT pg_sleep(60)")

        thread = threading.Thread(target=handler)
        thread.start()
        with psycopg.connect(dsn, autocommit=True) as watcher:
            query = "SELECT wait_event FROM pg_stat_activity WHERE pid = %s"
            deadline = time.monotonic() + PATIENCE
            while watcher.execute(query, (backend_pid,)).fetchone() != ("PgSleep",):
                assert time.monotonic() < deadline, "the query never started"
                time.sleep(0.01)
            said = busy_with(thread)
            watcher.execute("SELECT pg_cancel_backend(%s)", (backend_pid,))
        thread.join()
    assert said.startswith("handler at ") and __file__ in said, said
    assert said.endswith("(a handler still running)"), said


def test_sigkilled_workers_jobs_are_reclaimed_after_the_lease_and_run_by_another(
    app: App, queue: pgqueue.Queue, raw: Raw
) -> None:
    queue.enqueue("quick")  # then A claims whole batches (`Pace`)
    ids = queue.enqueue_many([("block", i) for i in range(60)])
    options = {"CLI_APP_CONCURRENCY": "4", "CLI_APP_BATCH_SIZE": "20"}
    with app.worker(*FLAVOURS["sync"], **options) as a:
        app.wait_until(lambda: sum(app.runs_of("start").values()) == 4, "A starts 4 jobs", a)
        # A batch being run, and the next claimed ahead as soon as it was handed out.
        app.wait_until(lambda: raw.count("status = 'running'") >= 20, "A holds a batch", a)
        started_by_a = set(app.runs_of("start"))
        a.send_signal(signal.SIGKILL)
        assert app.exit_code(a) == -signal.SIGKILL
    # Nobody gave them back: what A held is still running, under A's name.
    held = {job_id for (job_id,) in raw.rows("SELECT id FROM {table} WHERE status = 'running'")}
    assert len(held) >= 20
    assert (
        len(
            {
                r[0]
                for r in raw.rows("SELECT DISTINCT locked_by FROM {table} WHERE status = 'running'")
            }
        )
        == 1
    )

    app.release()
    b_options = {**options, "CLI_APP_VISIBILITY_TIMEOUT": "2"}
    with app.worker(*FLAVOURS["asyncio"], **b_options) as b:
        app.wait_until(lambda: set(app.runs_of("finish")) == set(ids), "every job handled", b)
        b.send_signal(signal.SIGTERM)
        assert app.exit_code(b) == 0, app.output()

    starts = app.runs_of("start")
    assert set(starts) == set(ids)  # every job handled at least once
    assert {job_id for job_id, n in starts.items() if n > 1} == started_by_a
    assert started_by_a <= held
    assert app.runs_of("finish") == Counter(ids)  # A finished none: it was killed first
    # A's jobs were claimed twice: the attempt the crash used up is counted.
    second_tries = app.execute("SELECT job_id, attempts FROM {runs} WHERE event = 'finish'")
    assert {job_id for job_id, attempts in second_tries if attempts == 2} == held
    assert "reaped" in app.output()
    assert raw.count() == 0


def test_every_worker_setting_is_a_flag_that_overrides_the_targets(
    dsn: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta

    from pgqueue.cli.worker import WORKER_SETTINGS, load_worker, worker_settings

    monkeypatch.setenv("PGQUEUE_DSN", dsn)
    monkeypatch.setenv("PGQUEUE_TABLE", table)
    args = cli.build_parser().parse_args(
        ["worker", "tests.cli_app:worker", "--concurrency", "3", "--batch-size", "7",
         "--kinds", "noop", "--queues", "mail", "--poll-interval", "2s", "--job-timeout", "1m",
         "--visibility-timeout", "10m", "--grace-period", "45s", "--call-timeout", "20s",
         "--claim-bytes", "1000000", "--name", "box-1", "--listen-conninfo", dsn]
    )  # fmt: skip
    given = worker_settings(args)
    assert set(given) == set(WORKER_SETTINGS) and None not in given.values()
    worker = load_worker(args.target, dsn=None, **given)
    s = worker.settings
    assert (s.concurrency, s.batch_size, s.kinds, s.queues) == (3, 7, ["noop"], ["mail"])
    assert (s.poll_interval, s.job_timeout, s.grace_period, s.call_timeout) == (2, 60, 45, 20)
    assert s.visibility_timeout == timedelta(minutes=10)
    assert (s.claim_bytes, s.name, s.listen_conninfo) == (1_000_000, "box-1", dsn)
    # Without flags, the target is served as it is.
    plain = cli.build_parser().parse_args(["worker", "tests.cli_app:worker"])
    target = load_worker(plain.target, dsn=None, **worker_settings(plain))
    assert target.settings.batch_size == 20 and target.settings.name != "box-1"


@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_a_worker_started_before_migrate_says_so_in_one_line(
    app: App, flavour: str, server_dsn: str
) -> None:
    missing = f"{app.table}_never_installed"
    with app.worker(*FLAVOURS[flavour], PGQUEUE_TABLE=missing) as proc:
        assert app.exit_code(proc) == 1, app.output()
    [error] = [line for line in app.output().splitlines() if " ERROR " in line]
    assert f' ERROR pgqueue.cli: relation "{missing}' in error
    assert error.endswith(
        f"does not exist: the queue's table {missing} is not installed; run `pgqueue migrate` first"
    )
    assert "Traceback" not in app.output()
