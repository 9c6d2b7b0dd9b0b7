"""The ``PGQUEUE`` setting: read, checked, and turned into a `pgqueue.Queue`.

Django-free decisions only take the settings dict as an argument, so the
checks run (and are tested) without a configured project.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import psycopg
from django.core.exceptions import ImproperlyConfigured
from psycopg.conninfo import make_conninfo

__all__ = ["PgQueueSettings", "conninfo_from_params", "read_settings"]

# Every key ``PGQUEUE`` may hold; anything else is a typo and refused.
KEYS: Final = frozenset(
    {
        "DATABASE",
        "DSN",
        "TABLE",
        "MAX_CONNECTIONS",
        "HISTORY",
        "TRANSACTION_POOLING",
        "HANDLERS",
        "WORKER",
    }
)


@dataclass(frozen=True)
class PgQueueSettings:
    """The ``PGQUEUE`` setting, checked.

    ``database`` is the alias in ``DATABASES`` whose server holds the job
    table and whose connection `pgqueue.contrib.django.enqueue` writes on;
    ``dsn`` overrides the DSN the queue's own pool (workers, results)
    connects with, which by default is that database's.
    ``transaction_pooling`` says that this DSN reaches the server through
    PgBouncer in transaction mode (docs/pgbouncer.md).
    """

    database: str = "default"
    dsn: str | None = None
    table: str = "pgqueue_jobs"
    max_connections: int = 4
    history: bool = False
    transaction_pooling: bool = False
    handlers: dict[str, str] = field(default_factory=dict)
    worker: dict[str, Any] = field(default_factory=dict)


def read_settings(raw: object) -> PgQueueSettings:
    """Check a ``PGQUEUE`` setting (a dict, or None for every default).

    Raises `ImproperlyConfigured` naming the key at fault.
    """
    if raw is None:
        return PgQueueSettings()
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(f"PGQUEUE must be a dict, not {type(raw).__name__}")
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise ImproperlyConfigured(
            f"PGQUEUE has unknown keys {unknown}; the keys are {sorted(KEYS)}"
        )
    default = PgQueueSettings()
    database = _text(raw, "DATABASE", default.database)
    dsn = raw.get("DSN")
    if dsn is not None and not isinstance(dsn, str):
        raise ImproperlyConfigured("PGQUEUE['DSN'] must be a str (or None)")
    max_connections = raw.get("MAX_CONNECTIONS", default.max_connections)
    if type(max_connections) is not int or max_connections < 1:
        raise ImproperlyConfigured("PGQUEUE['MAX_CONNECTIONS'] must be an int of at least 1")
    history = raw.get("HISTORY", default.history)
    if not isinstance(history, bool):
        raise ImproperlyConfigured("PGQUEUE['HISTORY'] must be True or False")
    pooling = raw.get("TRANSACTION_POOLING", default.transaction_pooling)
    if not isinstance(pooling, bool):
        raise ImproperlyConfigured("PGQUEUE['TRANSACTION_POOLING'] must be True or False")
    handlers = raw.get("HANDLERS", {})
    if not isinstance(handlers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in handlers.items()
    ):
        raise ImproperlyConfigured(
            "PGQUEUE['HANDLERS'] must map job kinds to dotted paths of functions"
        )
    worker = raw.get("WORKER", {})
    if not isinstance(worker, Mapping) or not all(isinstance(k, str) for k in worker):
        raise ImproperlyConfigured(
            "PGQUEUE['WORKER'] must be a dict of pgqueue.Worker keyword options"
        )
    return PgQueueSettings(
        database=database,
        dsn=dsn,
        table=_text(raw, "TABLE", default.table),
        max_connections=max_connections,
        history=history,
        transaction_pooling=pooling,
        handlers=dict(handlers),
        worker=dict(worker),
    )


def _text(raw: Mapping[str, Any], key: str, default: str) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str) or not value:
        raise ImproperlyConfigured(f"PGQUEUE[{key!r}] must be a non-empty str")
    return value


def _libpq_keywords() -> frozenset[str]:
    return frozenset(o.keyword.decode() for o in psycopg.pq.Conninfo.get_defaults())


def conninfo_from_params(params: Mapping[str, Any]) -> str:
    """A DSN from the keyword arguments Django connects with.

    Django adds arguments of its own (a cursor class, an adapters context,
    ``prepare_threshold``); only libpq's connection keywords are kept.
    """
    keywords = _libpq_keywords()
    kept = {k: v for k, v in params.items() if k in keywords and v is not None and v != ""}
    return make_conninfo("", **kept)
