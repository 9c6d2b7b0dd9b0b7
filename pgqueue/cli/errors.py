"""What goes wrong in the ``pgqueue`` command, as the exit status tells it."""

from __future__ import annotations


class UsageError(Exception):
    """Bad arguments or an unusable target: reported with the usage line, exit 2."""


class OperationFailed(Exception):
    """An operation that could not be done: one line on stderr, exit 1."""


def one_line(exc: BaseException | str) -> str:
    """A message on one line (libpq's span several)."""
    return " ".join(str(exc).split()) or type(exc).__name__
