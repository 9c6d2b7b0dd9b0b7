"""Test, lint and type-check pgqueue. Plain ``nox`` runs every session.

The suite starts an embedded PostgreSQL 18 (the ``embedded`` extra) unless
``PGQUEUE_TEST_DSN`` points at a server of your own.
"""

from __future__ import annotations

import os
import subprocess
import tempfile

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True

BACKENDS = ("sync", "asyncio", "trio")
PYTHON = None  # the interpreter nox runs on

# In CI (``.ci/run`` sets ``CI``), every service a session needs was
# installed, and a missing one fails the run; elsewhere, the session is
# skipped with a note naming the package to install.
IN_CI = bool(os.environ.get("CI"))
nox.options.error_on_missing_interpreters = IN_CI


def _needs(session: nox.Session, path: str, package: str, variable: str) -> None:
    """Skip (fail, in CI) the session when ``path`` is not on this machine."""
    if os.path.exists(path):
        return
    note = f"{path} not found: install Debian's {package} package, or set {variable}"
    if IN_CI:
        session.error(note)
    session.skip(note)


def _tests(session: nox.Session, *paths: str, backend: str | None = None, **env: str) -> None:
    session.install("-e", ".[test]")
    if backend:
        env["PGQUEUE_TEST_BACKEND"] = backend
    session.run("pytest", *(session.posargs or paths), env=env)


def _backend_session(backend: str) -> None:
    @nox.session(name=f"tests-{backend}", python=PYTHON, default=False)
    def tests(session: nox.Session) -> None:
        """The behaviour suite on one backend (tests-behaviour runs all three)."""
        _tests(session, "tests/behaviour", backend=backend)


for _backend in BACKENDS:
    _backend_session(_backend)


@nox.session(name="tests-behaviour", python=PYTHON)
def tests_behaviour(session: nox.Session) -> None:
    """The behaviour suite on sync, asyncio and trio, the three at once.

    Each run starts its own embedded server; most of a run is waiting on
    it, so the three take about half as long as one after another (114 s
    against 204 s here). Their output is shown one run at a time, once all
    have ended. With ``PGQUEUE_TEST_DSN`` set, prefer the ``tests-<backend>``
    sessions, one at a time: the three runs would share one server.
    """
    session.install("-e", ".[test]")
    args = [os.path.join(session.bin, "pytest"), *(session.posargs or ["tests/behaviour"])]
    venv = {"PATH": session.bin + os.pathsep + os.environ.get("PATH", "")}
    failed = []
    with tempfile.TemporaryDirectory(prefix="pgqueue-nox-") as logs:
        runs = []
        for backend in BACKENDS:
            log = open(os.path.join(logs, backend), "w+")  # noqa: SIM115 (closed below)
            env = {**os.environ, **venv, "PGQUEUE_TEST_BACKEND": backend}
            run = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
            runs.append((backend, run, log))
        for backend, run, log in runs:
            code = run.wait()
            log.seek(0)
            session.log(f"-- the behaviour suite on {backend}: exit {code}\n{log.read()}")
            log.close()
            if code:
                failed.append(backend)
    if failed:
        session.error(f"the behaviour suite failed on {', '.join(failed)}")


@nox.session(python=PYTHON)
def unit(session: nox.Session) -> None:
    """Everything below the database, in seconds: tests/unit (the core, the
    ledger, the worker's components against a fake queue) and the SQL
    snapshot. None of it starts PostgreSQL."""
    _tests(session, "tests/unit", "tests/test_sql_snapshot.py")


@nox.session(name="tests-core", python=PYTHON)
def tests_core(session: nox.Session) -> None:
    """The stateful model test, the CLI, the docs' and the examples' tests
    (tests/unit runs in the unit session)."""
    _tests(
        session,
        "tests",
        "--ignore=tests/unit",
        "--ignore=tests/behaviour",
        "--ignore=tests/reliability",
        "--ignore=tests/browser",
        "--ignore=tests/pgbouncer",
        backend="sync",
    )


@nox.session(python=PYTHON)
def browser(session: nox.Session) -> None:
    """The web dashboard in a real browser: Debian's Chromium driven by Playwright.

    Needs ``/usr/bin/chromium`` (``apt-get install chromium``; ``.ci/run``
    installs it when missing) or ``PGQUEUE_TEST_CHROMIUM``; Playwright
    downloads no browser of its own.
    """
    chromium = os.environ.get("PGQUEUE_TEST_CHROMIUM", "/usr/bin/chromium")
    _needs(session, chromium, "chromium", "PGQUEUE_TEST_CHROMIUM")
    session.install("-e", ".[browser]")
    session.run("pytest", *(session.posargs or ["tests/browser"]))


# The behaviour modules that tests-pgbouncer runs through the pooler: the
# queue's operations and the worker. Left out, for their run time only
# (they pass through it): test_schedules, test_operations; and test_tracing
# (its own extra).
# Left out by nature: test_worker_startup and test_migrations (roles the
# tests create, which PgBouncer's user list does not know), test_claim_plans
# and test_big_table (EXPLAIN and server settings, not the pooler's concern).
PGBOUNCER_BEHAVIOUR = (
    "test_queue",
    "test_queues",
    "test_bad_input",
    "test_unique",
    "test_job_control",
    "test_worker",
    "test_cancel_worker",
    "test_events",
    "test_rate_limits",
    "test_tasks",
)


@nox.session(name="tests-pgbouncer", python=PYTHON)
def tests_pgbouncer(session: nox.Session) -> None:
    """The queue through PgBouncer in transaction mode (docs/pgbouncer.md).

    tests/pgbouncer on every backend, then the behaviour suite's queue and
    worker modules on asyncio with ``dsn`` pointing at the pooler. Needs
    Debian's ``pgbouncer`` package (``.ci/run`` installs it), or
    ``PGQUEUE_TEST_PGBOUNCER_BIN``.
    """
    pgbouncer = os.environ.get("PGQUEUE_TEST_PGBOUNCER_BIN", "/usr/sbin/pgbouncer")
    _needs(session, pgbouncer, "pgbouncer", "PGQUEUE_TEST_PGBOUNCER_BIN")
    _tests(session, "tests/pgbouncer")
    modules = [f"tests/behaviour/{name}.py" for name in PGBOUNCER_BEHAVIOUR]
    _tests(session, *modules, backend="asyncio", PGQUEUE_TEST_PGBOUNCER="1")


@nox.session(name="tests-django6", python="3.12", venv_backend="virtualenv")
def tests_django6(session: nox.Session) -> None:
    """The Django integration on Django 6 and its own ``django.tasks``.

    Django 6 needs Python 3.12; on the interpreter nox runs on (3.11),
    tests-core runs the same tests on Django 5.2 with the ``django-tasks``
    package, whose task API Django 6 took in.
    """
    _tests(session, "tests/test_django.py", "tests/test_django_example.py")


@nox.session(name="tests-pg15", python=PYTHON, default=False)
def tests_pg15(session: nox.Session) -> None:
    """The behaviour suite on PostgreSQL 15, from its server binaries on disk.

    Not part of plain ``nox``: it needs Debian's ``postgresql-15`` package
    (or ``PGQUEUE_TEST_PG_BIN`` pointing at another bin directory). CI
    installs the package and runs it after the default sessions.
    """
    bin_dir = os.environ.get("PGQUEUE_TEST_PG_BIN", "/usr/lib/postgresql/15/bin")
    _needs(session, os.path.join(bin_dir, "initdb"), "postgresql-15", "PGQUEUE_TEST_PG_BIN")
    _tests(session, "tests/behaviour", backend="asyncio", PGQUEUE_TEST_PG_BIN=bin_dir)


@nox.session(python=PYTHON)
def reliability(session: nox.Session) -> None:
    """Crash, restart and abuse scenarios with worker processes (docs/reliability.md).

    Its scenarios mostly wait (on leases, restarts, refused connections):
    two pytest-xdist processes, each on its own embedded server, one module
    at a time each, take 345 s here against 646 s for one. One process
    when ``PGQUEUE_RELIABILITY_REPORT`` is set (it writes the report) or
    ``PGQUEUE_TEST_DSN`` is (the two would share one server).
    """
    alone = os.environ.get("PGQUEUE_RELIABILITY_REPORT") or os.environ.get("PGQUEUE_TEST_DSN")
    parallel = [] if alone else ["-n", "2", "--dist", "loadfile"]
    _tests(session, *parallel, "tests/reliability")


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the documentation site; any warning fails it."""
    session.install("-e", ".[docs]")
    # NO_MKDOCS_2_WARNING: mkdocs-material prints a banner about its successor on every build.
    session.run(
        "mkdocs",
        "build",
        "--strict",
        "--site-dir",
        "build/site",
        env={"NO_MKDOCS_2_WARNING": "1"},
    )


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, and the generated sync modules are current."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("python", "tools/unasync.py", "--check")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package and on every test (the browser tests' playwright too)."""
    session.install(
        "-e",
        ".[test,embedded,prometheus,otel,django,web,fastapi,sqlalchemy,flask,browser]",
        "mypy",
        "django-stubs",
        "pytest",  # pgqueue.testing.plugin
    )
    session.run("mypy", "--strict", "pgqueue")
    session.run("mypy", "--strict", "tests")
