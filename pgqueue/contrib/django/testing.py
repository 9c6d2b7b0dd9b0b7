"""`pgqueue.testing` on the ``PGQUEUE`` setting's queue and Django's connection.

Inside a ``django.test.TestCase`` (one transaction per test, rolled back at
its end) the jobs a test's code enqueued are seen, and run, on the test's
own connection::

    from pgqueue.contrib.django import testing as pgq_testing

    class CheckoutTests(TestCase):
        def test_checkout_sends_a_receipt(self):
            self.client.post("/checkout/", {"item": "teapot"})
            pgq_testing.assert_enqueued("send_receipt")
            drained = pgq_testing.drain()          # handlers and Django tasks
            self.assertEqual(drained.dead, [])

See docs/testing.md, "Django".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ... import testing
from ...core.draining import Drained
from ...core.jobs import Job
from . import connection, get_queue
from .worker import project_handlers

__all__ = ["Drained", "assert_enqueued", "assert_not_enqueued", "drain", "enqueued"]


def enqueued(
    kind: str | None = None,
    *,
    payload: Any = None,
    queue: str | None = None,
    using: str | None = None,
) -> list[Job]:
    """`pgqueue.testing.enqueued` on Django's connection (``using``: another alias)."""
    return testing.enqueued(get_queue(), kind, payload=payload, queue=queue,
                            conn=connection(using))  # fmt: skip


def assert_enqueued(
    kind: str | None = None,
    *,
    payload: Any = None,
    queue: str | None = None,
    count: int | None = None,
    using: str | None = None,
) -> list[Job]:
    """`pgqueue.testing.assert_enqueued` on Django's connection."""
    return testing.assert_enqueued(get_queue(), kind, payload=payload, queue=queue,
                                   count=count, conn=connection(using))  # fmt: skip


def assert_not_enqueued(
    kind: str | None = None,
    *,
    payload: Any = None,
    queue: str | None = None,
    using: str | None = None,
) -> None:
    """`pgqueue.testing.assert_not_enqueued` on Django's connection."""
    testing.assert_not_enqueued(get_queue(), kind, payload=payload, queue=queue,
                                conn=connection(using))  # fmt: skip


def drain(
    handlers: Mapping[str, Callable[..., Any]] | None = None,
    *,
    queues: Iterable[str] | None = None,
    with_scheduled: bool = False,
    using: str | None = None,
) -> Drained:
    """`pgqueue.testing.drain` on Django's connection, in the calling thread:
    the handlers (by default the project's, as ``manage.py pgqueue_worker``
    finds them, Django tasks included) see the test's rows."""
    found = project_handlers() if handlers is None else handlers
    return testing.drain(get_queue(), found, queues=queues, with_scheduled=with_scheduled,
                         conn=connection(using))  # fmt: skip
