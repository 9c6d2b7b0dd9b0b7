"""Test, lint and type-check pgqueue. Plain ``nox`` runs every session.

The suite starts an embedded PostgreSQL 18 (the ``embedded`` extra) unless
``PGQUEUE_TEST_DSN`` points at a server of your own.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = False

BACKENDS = ("sync", "asyncio", "trio")
PYTHON = None  # the interpreter nox runs on


def _tests(session: nox.Session, *paths: str, backend: str | None = None) -> None:
    session.install("-e", ".[test]")
    env = {"PGQUEUE_TEST_BACKEND": backend} if backend else {}
    session.run("pytest", *(session.posargs or paths), env=env)


def _backend_session(backend: str) -> None:
    @nox.session(name=f"tests-{backend}", python=PYTHON)
    def tests(session: nox.Session) -> None:
        """The behaviour suite on one backend."""
        _tests(session, "tests/behaviour", backend=backend)


for _backend in BACKENDS:
    _backend_session(_backend)


@nox.session(name="tests-core", python=PYTHON)
def tests_core(session: nox.Session) -> None:
    """Pure property tests, the stateful model test and the examples."""
    _tests(session, "tests", "--ignore=tests/behaviour", backend="sync")


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, and the generated sync modules are current."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("python", "tools/unasync.py", "--check")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package."""
    session.install("-e", ".[embedded]", "mypy")
    session.run("mypy", "--strict", "pgqueue")
