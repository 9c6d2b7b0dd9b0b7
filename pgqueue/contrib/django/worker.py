"""The worker ``manage.py pgqueue_worker`` runs, built from the project's settings."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import django
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import autodiscover_modules, import_string

from ...sync.worker import Worker
from . import get_queue, get_settings, registered_handlers
from .stale import close_stale_connections

__all__ = ["build_worker", "project_handlers", "set_up_and_build_worker", "with_fresh_connections"]

HANDLER_MODULE = "jobs"
"""The module of each installed app that is imported for its `handler` declarations."""


def project_handlers() -> dict[str, Callable[..., Any]]:
    """Every handler of the project, by kind.

    ``PGQUEUE["HANDLERS"]`` (kind -> dotted path), then the ``@handler``
    functions of each installed app's ``jobs`` module, then the runner of
    Django tasks under the kind of each configured ``PgQueueBackend``.
    """
    autodiscover_modules(HANDLER_MODULE)
    found: dict[str, Callable[..., Any]] = {}
    for kind, path in get_settings().handlers.items():
        try:
            found[kind] = import_string(path)
        except ImportError as exc:
            raise ImproperlyConfigured(f"PGQUEUE['HANDLERS'][{kind!r}]: {exc}") from exc
    found.update(registered_handlers())
    plain = {kind: with_fresh_connections(fn) for kind, fn in found.items()}
    return {**plain, **_task_handlers()}


def with_fresh_connections(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, with Django's stale database connections closed before and after
    each call, as Django does around a request (``CONN_MAX_AGE``, broken ones)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        close_stale_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_stale_connections()

    return call


def _task_handlers() -> dict[str, Callable[..., Any]]:
    try:
        from .backend import task_handlers
    except ImportError:  # no task framework installed: no task backend either
        return {}
    return task_handlers()


def build_worker(**overrides: Any) -> Worker:
    """A `pgqueue.Worker` on the settings' queue with the project's handlers;
    ``PGQUEUE["WORKER"]`` gives its options, ``overrides`` win over them."""
    options = {**get_settings().worker, **overrides}
    return Worker(get_queue(), project_handlers(), **options)


def set_up_and_build_worker(**overrides: Any) -> Worker:
    """`build_worker` in a process of its own (``--processes``): Django is set up
    first, from the settings module the supervisor's environment names."""
    django.setup()
    return build_worker(**overrides)
