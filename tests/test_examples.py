"""The examples run, as a user would run them, against the suite's server.

These are plain sync tests: each starts an example as a process of its own
and reads what it prints. Each run gets tables of its own (``PGQUEUE_TABLE``),
dropped afterwards, so reruns on a shared server do not collide.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg import sql

import pgqueue
from pgqueue.core.ops import QueueCore
from pgqueue.sync.driver import run_on

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture
def example_table(dsn: str) -> Iterator[str]:
    name = f"ex_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(dsn, autocommit=True) as conn:
        run_on(conn, QueueCore(name).uninstall())  # the job table and the tables beside it
        for table in (f"{name}_orders", f"{name}_receipts"):
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))


def run_example(dsn: str, table: str, script: str, *args: str) -> str:
    env = {**os.environ, "PGQUEUE_DSN": dsn, "PGQUEUE_TABLE": table}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{script} {' '.join(args)} failed:\n{done.stdout}{done.stderr}"
    return done.stdout


# Every example on every event loop, whichever backend the session selected:
# the examples are separate processes, so a sync test can run them all.
QUICKSTARTS = {
    "sync": ("quickstart_sync.py",),
    "asyncio": ("quickstart_async.py",),
    "trio": ("quickstart_async.py", "--trio"),
}


@pytest.mark.parametrize("flavour", list(QUICKSTARTS))
def test_quickstart_runs_and_drains_its_jobs(dsn: str, example_table: str, flavour: str) -> None:
    script, *args = QUICKSTARTS[flavour]
    out = run_example(dsn, example_table, script, *args)
    if flavour != "sync":
        assert f"event loop: {flavour}" in out
    assert "PGQUEUE_DSN is not set" not in out
    assert "exists: False" in out  # the rolled-back order left no job
    assert "(print_label) failed: no handler for kind 'print_label'; it is now dead" in out
    assert "1 job(s) succeeded; receipts sent for orders [1]" in out
    assert "enqueued 2,000 orders and jobs" in out
    assert "drained 2,000 jobs" in out
    assert "jobs/s" in out
    assert "{'pending': 0, 'running': 0, 'dead': 1, 'waiting': 0}" in out


# -- Flask: the app enqueues in its transaction, the worker sends receipts once -------------

FLASK_WORKERS = {
    "flask pgqueue worker": [
        *("-m", "flask", "--app", "examples/flask_app.py"),
        *("pgqueue", "worker", "--until-empty"),
    ],
    "flask pgqueue worker --processes 2": [
        *("-m", "flask", "--app", "examples/flask_app.py"),
        *("pgqueue", "worker", "--until-empty", "--processes", "2"),
    ],
    "pgqueue worker": ["-m", "pgqueue", "worker", "examples.flask_worker:worker", "--until-empty"],
    "python flask_worker.py": [str(EXAMPLES / "flask_worker.py"), "--until-empty"],
}


def run_flask_worker(dsn: str, table: str, how: str) -> str:
    env = {**os.environ, "PGQUEUE_DSN": dsn, "PGQUEUE_TABLE": table}
    done = subprocess.run(
        [sys.executable, *FLASK_WORKERS[how]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{how} failed:\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.mark.parametrize("how", list(FLASK_WORKERS))
def test_flask_orders_commit_with_their_jobs_and_the_worker_sends_each_receipt_once(
    dsn: str, example_table: str, how: str
) -> None:
    out = run_example(dsn, example_table, "flask_app.py", "--demo")
    assert "POST /orders teapot: 201 {'job_id': 1, 'order_id': 1}" in out
    assert "POST /orders kettle: 402 {'error': 'payment declined'}" in out
    # The declined order rolled back with its job: neither exists.
    assert "orders committed: ['teapot', 'cosy']; send_receipt jobs waiting: 2" in out

    out = run_flask_worker(dsn, example_table, how)
    assert "mail to ann@example.com: your receipt for order 1 (teapot)" in out
    assert "mail to cy@example.com: your receipt for order 3 (cosy)" in out
    assert "bob@example.com" not in out

    # At least once: the same receipt job delivered again sends nothing.
    with pgqueue.Queue(dsn, table=example_table) as q:
        q.enqueue("send_receipt", {"order_id": 1})
    out = run_flask_worker(dsn, example_table, how)
    assert "order 1: receipt already sent, nothing to do" in out
    assert "mail to" not in out

    with psycopg.connect(dsn) as conn:
        receipts = sql.Identifier(f"{example_table}_receipts")
        sent = conn.execute(sql.SQL("SELECT order_id FROM {} ORDER BY 1").format(receipts))
        assert sent.fetchall() == [(1,), (3,)]
        jobs = conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(example_table))
        )
        assert jobs.fetchone() == (0,)


# -- FastAPI: a real uvicorn serves the app; its lifespan runs the worker ---------------


class Server:
    """A process of its own whose output a thread keeps reading (so the pipe never fills)."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []

    def wait_for(self, text: str) -> str:
        """Read the output up to the first line holding ``text``; return that line."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if text in line:
                threading.Thread(target=self._drain, daemon=True).start()
                return line
        raise AssertionError(f"the process ended before printing {text!r}:\n{self.output}")

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        self.lines.extend(self.proc.stdout)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def stop(self, sig: int) -> int:
        """Send ``sig``; the exit code, once the process and its output ended."""
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=60)
        assert self.proc.stdout is not None
        self.lines.extend(self.proc.stdout)  # what the drain thread had not read yet
        return code


def test_fastapi_orders_commit_with_their_jobs_and_the_lifespan_worker_sends_receipts(
    dsn: str, example_table: str
) -> None:
    env = {**os.environ, "PGQUEUE_DSN": dsn, "PGQUEUE_TABLE": example_table}
    server = Server(
        [sys.executable, "-m", "uvicorn", "examples.fastapi_app:app", "--port", "0"], env
    )
    try:
        line = server.wait_for("Uvicorn running on ")
        base = line.split("Uvicorn running on ")[1].split()[0]
        with httpx.Client(base_url=base, timeout=60) as client:
            teapot = client.post("/orders", json={"item": "teapot", "email": "ann@example.com"})
            assert teapot.status_code == 201, teapot.text
            declined = client.post(
                "/orders", json={"item": "kettle", "email": "bob@example.com", "card": "declined"}
            )
            assert (declined.status_code, declined.json()) == (402, {"detail": "payment declined"})
            invalid = client.post("/orders", json={"item": "cosy"})
            assert invalid.status_code == 422  # no email: refused before anything is written
            cosy = client.post("/orders", json={"item": "cosy", "email": "cy@example.com"})
            assert cosy.status_code == 201, cosy.text

            # The worker in the app's lifespan runs both jobs: wait for their results.
            with pgqueue.Queue(dsn, table=example_table) as q:
                for order, email in ((teapot, "ann@example.com"), (cosy, "cy@example.com")):
                    assert q.wait(order.json()["job_id"], timeout=60) == {"sent_to": email}
            shown = client.get(f"/orders/{teapot.json()['order_id']}").json()
            assert shown == {
                "id": teapot.json()["order_id"],
                "item": "teapot",
                "receipt_sent": True,
            }
    finally:
        # SIGTERM is uvicorn's (the worker took no signal handler): it shuts the app down.
        code = server.stop(signal.SIGTERM)
    out = server.output
    # Once shut down, uvicorn (0.29 and later) re-raises the signal it caught: killed by it.
    assert code in (0, -signal.SIGTERM), out
    assert "mail to ann@example.com: your receipt for order 1 (teapot)" in out
    assert "mail to cy@example.com: your receipt for order 3 (cosy)" in out
    assert "bob@example.com" not in out
    assert "shutdown: worker stopped, queue closed" in out
    assert "Application shutdown complete." in out

    # The declined order rolled back with its job: neither exists.
    with psycopg.connect(dsn) as conn:
        orders = sql.Identifier(f"{example_table}_orders")
        items = conn.execute(sql.SQL("SELECT item FROM {} ORDER BY id").format(orders))
        assert items.fetchall() == [("teapot",), ("cosy",)]
        jobs = conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(example_table))
        )
        assert jobs.fetchone() == (0,)


# -- asyncio and trio: a worker beside the code that enqueues -----------------------


SERVICES = ["asyncio_service.py", "trio_program.py"]


@pytest.mark.parametrize("script", SERVICES)
def test_async_service_demo_drains_every_job_it_enqueued(
    dsn: str, example_table: str, script: str
) -> None:
    out = run_example(dsn, example_table, script, "--demo", "--orders", "150")
    assert "enqueued 150 orders' jobs: 300 jobs" in out
    assert "handled 300 jobs in" in out
    assert "{'render_invoice': 150, 'send_receipt': 150}" in out
    assert "{'pending': 0, 'running': 0, 'dead': 0, 'waiting': 0}" in out


@pytest.mark.parametrize("script", SERVICES)
def test_async_service_serves_until_sigterm_then_exits_cleanly(
    dsn: str, example_table: str, script: str, tmp_path: Path
) -> None:
    env = {**os.environ, "PGQUEUE_DSN": dsn, "PGQUEUE_TABLE": example_table}
    log_path = tmp_path / "service.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, str(EXAMPLES / script), "--interval", "0.05"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            # Liveness only: orders are placed and their jobs handled.
            deadline = time.monotonic() + 60
            while "placed order 3" not in log_path.read_text() or handled(dsn, example_table) < 2:
                assert proc.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, log_path.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    out = log_path.read_text()
    assert "SIGTERM, stopping gracefully" in out
    assert "stopped; handled {'render_invoice': " in out


def handled(dsn: str, table: str) -> int:
    """Orders whose jobs have both succeeded (their rows are gone)."""
    orders, jobs = sql.Identifier(f"{table}_orders"), sql.Identifier(table)
    query = sql.SQL(
        "SELECT count(*) FROM {orders} o WHERE NOT EXISTS"
        " (SELECT FROM {jobs} j WHERE (j.payload->>'order_id')::bigint = o.id)"
    ).format(orders=orders, jobs=jobs)
    with psycopg.connect(dsn) as conn:
        try:
            row = conn.execute(query).fetchone()
        except psycopg.errors.UndefinedTable:  # not set up yet
            return 0
    return int(row[0]) if row else 0
