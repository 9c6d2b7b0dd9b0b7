"""A transaction pooler (PgBouncer in transaction mode) between a queue and its server.

Such a pooler lends a server connection for one transaction at a time, so
two statements of one client connection may run on two server sessions.
pgqueue's statements keep no state between transactions (its advisory locks
are ``xact`` ones, its settings ``set_config(..., true)``), so they pass
through as they are; what does not pass is decided here, once, for both
backends:

* psycopg's prepared statements (made when a statement first runs on a
  queue's own connection, `DIRECT_KWARGS`; after five runs on a pool of the
  caller's) live in one server session: a queue told
  ``transaction_pooling=True`` makes its connections with
  ``prepare_threshold=None`` (`POOLER_KWARGS`), and refuses a pool of the
  caller's that would prepare (`check_pool_kwargs`).
* ``LISTEN`` holds a server session for as long as it should hear: through
  the pooler it hears nothing (or another client's notifications). A worker
  listens only on a direct connection (``listen_conninfo``) and otherwise
  polls (`worker_listens`); `Queue.wait` polls (`wait_listens`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "DIRECT_KWARGS",
    "GENERIC_PLANS",
    "POOLER_KWARGS",
    "check_pool_kwargs",
    "configures",
    "pool_kwargs",
    "validate_transaction_pooling",
    "wait_listens",
    "worker_listens",
]

POOLER_KWARGS: Final[Mapping[str, Any]] = {"prepare_threshold": None}
"""Connection keyword arguments for a connection through a transaction pooler."""


def validate_transaction_pooling(value: object) -> bool:
    """``transaction_pooling`` is a bool."""
    if not isinstance(value, bool):
        raise TypeError(f"transaction_pooling must be a bool, not {type(value).__name__}")
    return value


DIRECT_KWARGS: Final[Mapping[str, Any]] = {"prepare_threshold": 0}
"""Connection keyword arguments for a queue's own connection to the server:
every statement prepared when it first runs (psycopg's default threshold
runs each five times unprepared first), planned once with `GENERIC_PLANS`."""

GENERIC_PLANS: Final = (
    "SELECT set_config('plan_cache_mode', 'force_generic_plan', false)"
    " WHERE current_setting('plan_cache_mode', true) = 'auto'"
)
"""Run once on each new connection of a queue's own pool, unless through a
transaction pooler (`configures`): its prepared statements keep the plan
made at their first run, unless the DSN chose a ``plan_cache_mode``.

By default the server plans a prepared statement for the values of each
run (a custom plan) for five runs, and then keeps doing so for as long as
its cost estimates favour the custom plans over the generic one. The turns
of a worker that claims a few jobs at a time were planned at every run
that way (seen in the server's log; a draining worker's went generic by
themselves): about 1 ms of the server's time in each bind message, against
0.05-0.15 ms with the generic plan, whose execution took the same 0.2-0.5
ms. The partial indexes' order and the claim's small literal
``LIMIT`` leave one sensible plan, and the claim-plan tests check that the
generic one reads O(batch) (``docs/performance.md#generic-plans``)."""


def configures(*, transaction_pooling: bool) -> bool:
    """Whether a queue's own pool runs `GENERIC_PLANS` on each new connection:
    not through a transaction pooler, which prepares nothing (and would leave
    the setting on a server session another client gets next)."""
    return not transaction_pooling


def pool_kwargs(kwargs: Mapping[str, Any], *, transaction_pooling: bool) -> dict[str, Any]:
    """The keyword arguments a queue's own pool connects with: ``kwargs``, and
    through a transaction pooler no prepared statements, else every
    statement prepared at once (`DIRECT_KWARGS`)."""
    if transaction_pooling:
        return {**kwargs, **POOLER_KWARGS}
    return {**DIRECT_KWARGS, **kwargs}


def check_pool_kwargs(kwargs: object, *, transaction_pooling: bool) -> None:
    """Refuse a caller's pool that would prepare statements through a transaction
    pooler (``kwargs`` that are a function are the caller's to get right)."""
    if not transaction_pooling or callable(kwargs):
        return
    given = dict(kwargs or {}) if isinstance(kwargs, Mapping) or kwargs is None else {}
    if given.get("prepare_threshold", 5) is not None:
        raise ValueError(
            "transaction_pooling=True: the pool's connections must not prepare statements "
            "(a transaction pooler runs them on other server sessions); build the pool with "
            "kwargs={'prepare_threshold': None}"
        )


def worker_listens(listen_conninfo: str | None, *, transaction_pooling: bool) -> bool:
    """Whether a worker LISTENs: on ``listen_conninfo`` when given, else on a
    connection made like the pool's, unless that goes through a transaction
    pooler (the worker then finds its jobs by polling, every ``poll_interval``)."""
    return listen_conninfo is not None or not transaction_pooling


def wait_listens(*, transaction_pooling: bool) -> bool:
    """Whether `Queue.wait` LISTENs for the job's result on its connection, or
    only polls (through a transaction pooler)."""
    return not transaction_pooling
