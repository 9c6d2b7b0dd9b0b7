"""Django's stale connections, closed around a handler, as Django does around a request."""

from __future__ import annotations

from django.db import connections

__all__ = ["close_stale_connections"]


def close_stale_connections() -> None:
    """Django's ``close_old_connections``, but a connection inside an atomic
    block is left alone: closing it would end that block's transaction (a
    handler run by `pgqueue.contrib.django.testing.drain` in a ``TestCase``,
    whose test runs in one)."""
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()
