"""What goes wrong in the ``pgqueue`` command, as the exit status tells it."""

from __future__ import annotations

import psycopg

from ..core.events import one_line

__all__ = ["OperationFailed", "UsageError", "not_migrated", "one_line"]


class UsageError(Exception):
    """Bad arguments or an unusable target: reported with the usage line, exit 2."""


class OperationFailed(Exception):
    """An operation that could not be done: one line on stderr, exit 1."""


def not_migrated(exc: psycopg.Error, table: str, migrate: str = "pgqueue migrate") -> str:
    """One line for a worker started on a table that was never installed."""
    said = exc.diag.message_primary or one_line(exc)
    return f"{said}: the queue's table {table} is not installed; run `{migrate}` first"
