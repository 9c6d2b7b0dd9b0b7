"""Tests below the database: the core, the ledger, the worker's components
against a fake queue. ``nox -s unit`` runs them in seconds; none of them may
start PostgreSQL."""

from __future__ import annotations

import pytest

NO_DATABASE = (
    "a test under tests/unit asked for a database: it belongs beside the real-server suites"
)


@pytest.fixture(scope="session")
def server_dsn() -> str:
    pytest.fail(NO_DATABASE)
