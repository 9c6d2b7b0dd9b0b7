"""``pgqueue worker``, ``flask pgqueue worker`` and ``manage.py pgqueue_worker``
take the same flags, spelled and checked the same (`pgqueue.cli.flags`), and
run the worker the same way (`pgqueue.cli.worker.run_worker_command`)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import pgqueue
from pgqueue import cli
from pgqueue.cli.flags import FLAGS, WORKER_SETTINGS
from pgqueue.core.worker import WorkerSettings

from .test_cli import PATIENCE, free_port
from .test_cli_health import answers

ROOT = Path(__file__).resolve().parent.parent

# What only `pgqueue worker` takes, and why: the frameworks' commands build
# their worker from the app's configuration, which names the server (no
# TARGET, no --dsn), and that worker is a pgqueue.Worker, whose plain-function
# handlers run on threads, never on trio (no --trio).
ONLY_PGQUEUE = {"--dsn", "--trio"}


def long_options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--")}


def pgqueue_flags() -> set[str]:
    args = cli.build_parser().parse_args(["worker", "app:worker"])
    return long_options(args.subparser) - {"--help"}


def flask_command() -> click.Command:
    from pgqueue.contrib.flask import commands

    command = commands.commands["worker"]
    return command


def flask_flags() -> set[str]:
    # Hidden: the deprecated --queue and --kind, which still work.
    params = [p for p in flask_command().params if not getattr(p, "hidden", False)]
    return {o for p in params for o in p.opts if o.startswith("--")}


def django_parser() -> argparse.ArgumentParser:

    from pgqueue.contrib.django.management.commands.pgqueue_worker import Command

    return Command().create_parser("manage.py", "pgqueue_worker")


def django_flags() -> set[str]:
    from django.core.management.base import BaseCommand

    # Less the options every Django command takes (--settings, --verbosity...).
    base = long_options(BaseCommand().create_parser("manage.py", "any"))
    return long_options(django_parser()) - base


def test_every_worker_setting_has_a_flag() -> None:
    assert set(WORKER_SETTINGS) == {f.name for f in dataclasses.fields(WorkerSettings)}


def test_the_three_worker_commands_take_the_same_flags() -> None:
    table = {flag.option for flag in FLAGS}
    assert pgqueue_flags() == table | ONLY_PGQUEUE
    assert flask_flags() == table
    assert django_flags() == table


BAD = [
    (["--concurrency", "0"], "must be at least 1, got 0"),
    (["--poll-interval", "soon"], "not a duration: 'soon'"),
    (["--queues", ","], "name at least one queue"),
    (["--metrics-port", "70000"], "not a port number (1 to 65535): 70000"),
    (["--name", " "], "a worker's name must not be blank"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_each_command_refuses_a_bad_flag_with_the_same_message(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args(["worker", "app:worker", *args])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err

    from django.core.management.base import CommandError

    with pytest.raises(CommandError) as refused:
        django_parser().parse_args(args)
    assert message in str(refused.value)

    result = CliRunner().invoke(flask_command(), args)
    assert result.exit_code == 2
    assert message in result.output


def test_log_level_takes_the_same_levels_in_every_command() -> None:
    assert cli.build_parser().parse_args(["worker", "a:w", "--log-level", "debug"]).log_level == (
        "DEBUG"
    )
    assert django_parser().parse_args(["--log-level", "debug"]).log_level == "DEBUG"
    result = CliRunner().invoke(flask_command(), ["--log-level", "loud"])
    assert result.exit_code == 2 and "'loud' is not one of DEBUG, INFO" in result.output


# -- flask pgqueue worker, in a process of its own, as it is run ----------------------------


def flask(dsn: str, table: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "flask", "--app", "tests.flask_flags_app", "pgqueue", *args]


def run_flask(dsn: str, table: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        flask(dsn, table, *args),
        cwd=ROOT,
        env={**os.environ, "PGQUEUE_DSN": dsn, "PGQUEUE_TABLE": table},
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=False,
    )


@pytest.fixture
def flask_queue(dsn: str, table: str) -> Iterator[pgqueue.Queue]:
    with pgqueue.Queue(dsn, table=table) as q:
        q.install()
        yield q


@pytest.mark.parametrize(
    "queues", [["--queues", "mail"], ["--queue", "mail"]], ids=["--queues", "deprecated --queue"]
)
def test_flask_worker_applies_the_settings_given_as_flags(
    dsn: str, table: str, flask_queue: pgqueue.Queue, queues: list[str]
) -> None:
    mail = flask_queue.enqueue("note", {"args": ["mail"], "kwargs": {}}, queue="mail")
    other = flask_queue.enqueue("note", {"args": ["other"], "kwargs": {}}, queue="other")

    done = run_flask(dsn, table, "worker", "--until-empty", "--name", "box-1", *queues,
                     "--batch-size", "3", "--poll-interval", "1s")  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ran {mail} (mail) by box-1" in done.stdout
    assert "(other)" not in done.stdout
    job = flask_queue.get(other)
    assert job is not None and job.status == pgqueue.JobStatus.PENDING
    deprecated = "--queue is deprecated; use --queues a,b" in done.stderr
    assert deprecated == (queues[0] == "--queue")


def test_flask_worker_started_before_migrate_says_so_in_one_line(dsn: str, table: str) -> None:
    done = run_flask(dsn, f"{table}_never_installed", "worker", "--until-empty")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    [error] = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert error.endswith("is not installed; run `flask pgqueue migrate` first")


@contextmanager
def flask_worker(dsn: str, table: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        flask(dsn, table, "worker", *args),
        cwd=ROOT,
        env={**os.environ, "PGQUEUE_DSN": dsn, "PGQUEUE_TABLE": table},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_flask_worker_serves_health_probes(
    dsn: str, table: str, flask_queue: pgqueue.Queue
) -> None:
    port = free_port()
    with flask_worker(dsn, table, "--health-port", str(port), "--health-host", "127.0.0.1") as proc:
        deadline = time.monotonic() + PATIENCE
        while proc.poll() is None and not answers(port, "/readyz", 200):
            assert time.monotonic() < deadline, "the worker never said it was ready"
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[0]
        assert answers(port, "/livez", 200)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=PATIENCE)
    assert proc.returncode == 0, out
    assert f"serving health probes (/livez, /readyz) on port {port}" in out
