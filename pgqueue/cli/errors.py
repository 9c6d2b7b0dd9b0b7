"""What goes wrong in the ``pgqueue`` command, as the exit status tells it."""

from __future__ import annotations

from ..core.events import one_line

__all__ = ["OperationFailed", "UsageError", "one_line"]


class UsageError(Exception):
    """Bad arguments or an unusable target: reported with the usage line, exit 2."""


class OperationFailed(Exception):
    """An operation that could not be done: one line on stderr, exit 1."""
