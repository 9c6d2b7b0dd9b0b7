"""pgqueue for Django: a queue built from settings, jobs that commit with the ORM.

Add ``"pgqueue.contrib.django"`` to ``INSTALLED_APPS``; the ``PGQUEUE``
setting (optional) names the job table and which database holds it::

    PGQUEUE = {"TABLE": "pgqueue_jobs", "DATABASE": "default"}

Then, in a view::

    from django.db import transaction
    from pgqueue.contrib import django as pgq

    with transaction.atomic():
        order = Order.objects.create(item="teapot")
        pgq.enqueue("send_receipt", {"order_id": order.pk})

The job is written on Django's own connection, in the ``atomic()`` block's
transaction: it exists if and only if the order does. ``manage.py
pgqueue_migrate`` creates the job table, ``manage.py pgqueue_worker`` runs
the handlers (``@pgq.handler("send_receipt")`` in an app's ``jobs.py``, or
``PGQUEUE["HANDLERS"]``), and `pgqueue.contrib.django.backend.PgQueueBackend`
is a backend for Django's task framework. See docs/django.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import psycopg
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.db import connections

from ...core.jobs import JobSpec, validate_kind
from ...core.ops import Cancelled
from ...sync.queue import Queue
from .conf import PgQueueSettings, conninfo_from_params, read_settings

__all__ = [
    "cancel",
    "close_queue",
    "connection",
    "enqueue",
    "enqueue_many",
    "get_queue",
    "get_settings",
    "handler",
    "registered_handlers",
]

H = TypeVar("H", bound=Callable[..., Any])

# The process's queue, built at first use from the settings. Written under
# _lock by get_queue and close_queue; read by everyone.
_lock = threading.Lock()
_queue: Queue | None = None
# Handlers registered with @handler; written at import time of the modules
# that declare them, read by the worker command.
_handlers: dict[str, Callable[..., Any]] = {}


def get_settings() -> PgQueueSettings:
    """The ``PGQUEUE`` setting, checked (`ImproperlyConfigured` if it is wrong)."""
    return read_settings(getattr(settings, "PGQUEUE", None))


def get_queue() -> Queue:
    """The process's `pgqueue.Queue`, built from the settings at first use.

    Its own pool (``PGQUEUE["MAX_CONNECTIONS"]``, opened lazily) serves
    workers, results and operator calls; `enqueue` writes on Django's
    connection instead. Thread-safe; `close_queue` closes it.
    """
    global _queue
    with _lock:
        if _queue is None:
            conf = get_settings()
            dsn = conf.dsn or _database_conninfo(conf.database)
            try:
                _queue = Queue(
                    dsn,
                    table=conf.table,
                    max_connections=conf.max_connections,
                    history=conf.history,
                    transaction_pooling=conf.transaction_pooling,
                )
            except (TypeError, ValueError) as exc:
                raise ImproperlyConfigured(f"PGQUEUE: {exc}") from exc
        return _queue


def close_queue() -> None:
    """Close the process's queue (its pool); the next `get_queue` builds a new one."""
    global _queue
    with _lock:
        queue, _queue = _queue, None
    if queue is not None:
        queue.close()


def _reset_on_change(*, setting: str, **kwargs: Any) -> None:
    if setting in ("PGQUEUE", "DATABASES"):
        close_queue()


setting_changed.connect(_reset_on_change)


def _database_conninfo(alias: str) -> str:
    if alias not in settings.DATABASES:
        raise ImproperlyConfigured(f"PGQUEUE['DATABASE'] is {alias!r}, which DATABASES lacks")
    wrapper = connections[alias]
    if wrapper.vendor != "postgresql":
        raise ImproperlyConfigured(
            f"PGQUEUE needs a PostgreSQL database; DATABASES[{alias!r}] is {wrapper.vendor}"
        )
    return conninfo_from_params(wrapper.get_connection_params())


def connection(using: str | None = None) -> psycopg.Connection[Any]:
    """Django's psycopg 3 connection for the database ``using`` (default: the
    queue's), connected if it was not: inside ``transaction.atomic()`` it is
    in that block's transaction."""
    alias = using or get_settings().database
    wrapper = connections[alias]
    wrapper.ensure_connection()
    conn = wrapper.connection
    if not isinstance(conn, psycopg.Connection):
        raise ImproperlyConfigured(
            f"DATABASES[{alias!r}] must use PostgreSQL through psycopg 3 (pip install "
            f"psycopg) for jobs to commit with the ORM; its connection is a "
            f"{type(conn).__module__}.{type(conn).__name__}"
        )
    return conn


def enqueue(
    kind: str,
    payload: Any = None,
    *,
    using: str | None = None,
    conn: psycopg.Connection[Any] | None = None,
    **options: Any,
) -> int:
    """`pgqueue.Queue.enqueue` on Django's connection: the job commits or rolls
    back with the ORM's writes in the current ``transaction.atomic()`` block
    (outside one, Django's autocommit commits it at once).

    ``using`` picks another database alias; ``conn`` any psycopg connection.
    The other keywords are `Queue.enqueue`'s (``delay``, ``queue``,
    ``priority``, ``unique_key``, ``result_ttl``...). Bad input raises before
    anything is written.
    """
    queue = get_queue()
    return queue.enqueue(kind, payload, conn=conn or connection(using), **options)


def enqueue_many(
    specs: Iterable[JobSpec | tuple[str, Any]],
    *,
    using: str | None = None,
    conn: psycopg.Connection[Any] | None = None,
) -> list[int]:
    """`pgqueue.Queue.enqueue_many` on Django's connection, like `enqueue`."""
    return get_queue().enqueue_many(specs, conn=conn or connection(using))


def cancel(
    *job_ids: int, using: str | None = None, conn: psycopg.Connection[Any] | None = None
) -> Cancelled:
    """`pgqueue.Queue.cancel` on Django's connection: inside ``atomic()``, the
    cancel takes effect when the block commits."""
    return get_queue().cancel(*job_ids, conn=conn or connection(using))


def handler(kind: str) -> Callable[[H], H]:
    """Register the decorated plain function as the handler of ``kind`` for
    ``manage.py pgqueue_worker``, which imports every installed app's
    ``jobs`` module to find them::

        @pgq.handler("send_receipt")
        def send_receipt(job: pgqueue.Job) -> None: ...
    """

    validate_kind(kind)

    def register(fn: H) -> H:
        if not callable(fn):
            raise TypeError(f"the handler for {kind!r} is not callable")
        _handlers[kind] = fn
        return fn

    return register


def registered_handlers() -> dict[str, Callable[..., Any]]:
    """The handlers registered with `handler` so far, by kind."""
    return dict(_handlers)
