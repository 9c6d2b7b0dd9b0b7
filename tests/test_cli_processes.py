"""``pgqueue worker --processes N``: one supervisor, N worker processes.

Run as a user runs it, with the worker module of `tests.cli_app`: what the
processes did is read back from ``<table>_runs`` (each handler's start and
finish, with its process id) and from the supervisor's log.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import urllib.request
from collections import Counter

import pytest

import pgqueue

from .conftest import Raw
from .test_cli import FLAVOURS, PATIENCE, App, app, free_port, queue, run_command

__all__ = ["app", "queue"]  # fixtures, used by name


def started(app: App) -> list[int]:
    """The pids of the worker processes the supervisor logged as started, in order."""
    return [
        int(pid) for pid in re.findall(r"worker process \d+ started \(pid (\d+)\)", app.output())
    ]


def pids_of(app: App, event: str) -> Counter[int]:
    """How many handlers reached ``event`` in each process."""
    rows = app.execute("SELECT pid FROM {runs} WHERE event = %s", event)
    return Counter(pid for (pid,) in rows)


@pytest.mark.parametrize("flavour", ["sync", "trio"])
def test_sigkilled_child_is_replaced_and_its_jobs_come_back_by_their_lease(
    app: App, queue: pgqueue.Queue, raw: Raw, flavour: str
) -> None:
    ids = queue.enqueue_many([("block", i) for i in range(6)])
    options = {
        "CLI_APP_CONCURRENCY": "1",
        "CLI_APP_BATCH_SIZE": "1",
        "CLI_APP_VISIBILITY_TIMEOUT": "2",
    }
    with app.worker(*FLAVOURS[flavour], "--processes", "2", **options) as proc:
        app.wait_until(lambda: len(pids_of(app, "start")) == 2, "both processes run a job", proc)
        victim = min(pids_of(app, "start"))
        [held] = [r[0] for r in app.execute("SELECT job_id FROM {runs} WHERE pid = %s", victim)]
        app.wait_until(lambda: len(started(app)) == 2, "both starts logged", proc)
        os.kill(victim, signal.SIGKILL)
        app.wait_until(lambda: len(started(app)) == 3, "a process started in its place", proc)
        app.release()
        app.wait_until(lambda: set(app.runs_of("finish")) == set(ids), "every job handled", proc)
        proc.send_signal(signal.SIGTERM)
        assert app.exit_code(proc) == 0, app.output()

    assert app.runs_of("finish") == Counter(ids)  # each job finished once
    assert app.runs_of("start")[held] == 2  # the killed one's job ran again, after its lease
    [(attempts,)] = app.execute(
        "SELECT attempts FROM {runs} WHERE job_id = %s AND event = 'finish'", held
    )
    assert attempts == 2
    assert victim not in pids_of(app, "finish")
    assert re.search(rf"\(pid {victim}\) was killed by SIGKILL .*; restarting it in", app.output())
    assert raw.count() == 0


def test_max_jobs_per_child_replaces_processes_without_losing_or_rerunning_a_job(
    app: App, queue: pgqueue.Queue, raw: Raw
) -> None:
    ids = queue.enqueue_many([("noop", i) for i in range(24)])
    options = {"CLI_APP_CONCURRENCY": "2", "CLI_APP_BATCH_SIZE": "4"}
    args = ["--processes", "2", "--max-jobs-per-child", "4", "--until-empty"]
    with app.worker(*FLAVOURS["sync"], *args, **options) as proc:
        assert app.exit_code(proc) == 0, app.output()

    assert app.runs_of("finish") == Counter(ids)  # every job, once
    finishes = app.execute("SELECT attempts FROM {runs}")
    assert {attempts for (attempts,) in finishes} == {1}  # none ran twice, none was reaped
    per_process = pids_of(app, "finish")
    # A process stops once 4 of its outcomes are written, and finishes the
    # jobs it had started by then: each one that ran 4 or more retired, with
    # its count right; the last of each slot found nothing more to do.
    retired = {int(pid): int(n) for pid, n in
               re.findall(r"\(pid (\d+)\) retired after (\d+) jobs", app.output())}  # fmt: skip
    assert retired == {pid: n for pid, n in per_process.items() if n >= 4}
    assert len(retired) >= 1
    assert len(started(app)) == 2 + len(retired)  # each retired process was replaced
    assert raw.count() == 0


def stop_signal(proc: subprocess.Popen[bytes], how: str) -> None:
    if how == "sigterm":
        proc.send_signal(signal.SIGTERM)
    else:  # Ctrl-C in a terminal: to every process of the foreground group
        os.killpg(proc.pid, signal.SIGINT)


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_stop_signal_stops_every_child_gracefully_and_the_supervisor_exits_zero(
    app: App, queue: pgqueue.Queue, raw: Raw, how: str
) -> None:
    ids = queue.enqueue_many([("block", i) for i in range(8)])
    options = {"CLI_APP_CONCURRENCY": "1", "CLI_APP_BATCH_SIZE": "2"}
    with app.worker(*FLAVOURS["asyncio"], "--processes", "2", **options) as proc:
        app.wait_until(lambda: len(pids_of(app, "start")) == 2, "both processes run a job", proc)
        running = set(app.runs_of("start"))
        stop_signal(proc, how)
        # Each process gives back at once the jobs it claimed but did not
        # start, and waits for the one it runs (one signal each: not
        # interrupted, though a Ctrl-C reaches the whole process group).
        app.wait_until(
            lambda: raw.count("status = 'pending' AND attempts = 0") == 6, "the release", proc
        )
        assert raw.count("status = 'running'") == 2
        assert proc.poll() is None
        app.release()
        assert app.exit_code(proc) == 0, app.output()

    assert app.runs_of("finish") == Counter(running)
    assert sorted(r[0] for r in raw.rows("SELECT id FROM {table}")) == sorted(set(ids) - running)
    assert raw.count("status = 'pending' AND attempts = 0") == 6
    for pid in started(app):
        assert f"(pid {pid}) exited with status 0" in app.output()


def test_second_stop_signal_interrupts_every_childs_jobs(
    app: App, queue: pgqueue.Queue, raw: Raw
) -> None:
    queue.enqueue_many([("block", i) for i in range(4)])
    options = {"CLI_APP_CONCURRENCY": "1", "CLI_APP_BATCH_SIZE": "1"}
    with app.worker(*FLAVOURS["sync"], "--processes", "2", **options) as proc:
        app.wait_until(lambda: len(pids_of(app, "start")) == 2, "both processes run a job", proc)
        proc.send_signal(signal.SIGTERM)
        app.wait_until(lambda: raw.count("status = 'pending'") == 2, "the release", proc)
        proc.send_signal(signal.SIGTERM)
        # Interrupted: pending again at once, the attempt counted.
        app.wait_until(
            lambda: raw.count("status = 'pending' AND attempts = 1") == 2, "interruption", proc
        )
        # The handler threads cannot be killed; let them return so the processes can end.
        app.release()
        assert app.exit_code(proc) == 0, app.output()
    interrupted = raw.rows("SELECT last_error FROM {table} WHERE attempts = 1")
    assert len(interrupted) == 2
    assert all("interrupted" in error for (error,) in interrupted)
    assert raw.count("status = 'pending'") == 4


def test_children_of_a_killed_supervisor_stop_gracefully(
    app: App, queue: pgqueue.Queue, raw: Raw
) -> None:
    queue.enqueue_many([("block", i) for i in range(6)])
    options = {"CLI_APP_CONCURRENCY": "1", "CLI_APP_BATCH_SIZE": "1"}
    with app.worker(*FLAVOURS["sync"], "--processes", "2", **options) as proc:
        app.wait_until(lambda: len(pids_of(app, "start")) == 2, "both processes run a job", proc)
        running = set(app.runs_of("start"))
        proc.send_signal(signal.SIGKILL)
        assert app.exit_code(proc) == -signal.SIGKILL
    # No orphan keeps claiming: each gives back what it did not start ...
    app.wait_until(lambda: raw.count("status = 'pending' AND attempts = 0") == 4, "the release")
    app.release()
    # ... and finishes the job it runs.
    app.wait_until(lambda: app.runs_of("finish") == Counter(running), "the running jobs end")
    app.wait_until(lambda: raw.count() == 4, "their outcomes written")
    assert "the supervisor is gone: stopping" in app.output()


def test_metrics_port_serves_every_childs_events_together(app: App, queue: pgqueue.Queue) -> None:
    ids = queue.enqueue_many([("block", i) for i in range(6)])
    port = free_port()
    labels = f'event="succeeded",kind="block",queue="default",table="{app.table}"'
    succeeded = f"pgqueue_jobs_total{{{labels}}} 6.0"
    metrics = ""

    def scraped() -> bool:
        nonlocal metrics
        url = f"http://127.0.0.1:{port}/metrics"
        with urllib.request.urlopen(url, timeout=PATIENCE) as response:
            metrics = response.read().decode()
        return succeeded in metrics

    options = {"CLI_APP_CONCURRENCY": "1", "CLI_APP_BATCH_SIZE": "1"}
    args = ["--processes", "2", "--metrics-port", str(port)]
    with app.worker(*FLAVOURS["sync"], *args, **options) as proc:
        # Jobs in each process, so that the sum is of both.
        app.wait_until(lambda: len(pids_of(app, "start")) == 2, "both processes run a job", proc)
        app.release()
        app.wait_until(lambda: app.runs_of("finish") == Counter(ids), "the jobs to run", proc)
        app.wait_until(scraped, "6 successes in the metrics", proc)
        proc.send_signal(signal.SIGTERM)
        assert app.exit_code(proc) == 0, app.output()
    assert f'pgqueue_queue_up{{table="{app.table}"}} 1.0' in metrics


def test_a_child_that_cannot_set_up_its_worker_stops_them_all_with_status_2(app: App) -> None:
    # The module registers pgqueue's metrics itself: each process would fail alike.
    args = ["--processes", "2", "--metrics-port", str(free_port())]
    with app.worker("tests.cli_app_metered:worker", *args) as proc:
        assert app.exit_code(proc) == 2, app.output()
    assert "cannot set up the worker: DuplicateTimeseries" in app.output()
    assert "could not set up its worker; stopping" in app.output()


def test_max_jobs_per_child_without_processes_is_a_usage_error(app: App) -> None:
    done = run_command(app, "worker", "tests.cli_app:worker", "--max-jobs-per-child", "5")
    assert done.returncode == 2, done.stderr
    assert "--max-jobs-per-child needs --processes" in done.stderr
