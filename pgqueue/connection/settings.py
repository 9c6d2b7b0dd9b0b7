"""The settings pgqueue connects with, whatever drives the connection:
keepalives, autocommit, how a pool reconnects, and what a pool given by the
caller connects with (for the connections a worker or a wait opens beside
it). Used by the blocking driver (`pgqueue.connection.blocking`), the async
one (`pgqueue.aio.driver`), the worker's notifier and the waits.
"""

from __future__ import annotations

from typing import Any, Final

from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, ConnectionPool

__all__ = [
    "KEEPALIVES",
    "RECONNECT_TIMEOUT",
    "connection_kwargs",
    "pool_conninfo",
    "resolve_settings",
]

# A connection whose peer went silent (a NAT or firewall dropped its state, a
# host died behind a proxy) fails within about a minute instead of waiting
# forever: TCP keepalive probes after 30 s of silence, 3 of them 10 s apart,
# and unacknowledged data given up after 60 s. libpq ignores them on Unix
# sockets. A DSN or pool that sets any of them keeps its own value.
KEEPALIVES: Final[dict[str, Any]] = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 60_000,
}


def connection_kwargs(conninfo: str, kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """``kwargs`` and autocommit, with the `KEEPALIVES` neither sets."""
    given = {**conninfo_to_dict(conninfo), **(kwargs or {})}
    extra = {k: v for k, v in KEEPALIVES.items() if k not in given}
    return {**(kwargs or {}), "autocommit": True, **extra}


# psycopg_pool tries a failed connection again on a doubling delay (1 s, 2 s,
# 4 s...) for its ``reconnect_timeout`` (5 minutes by default): after an
# outage of a minute, its next try may come half a minute after the server
# is back. The pools a queue makes give up a try after RECONNECT_TIMEOUT and
# start a new one at once (`reconnect_now`): a try every one or two seconds
# (psycopg_pool's own jitter spreads the workers), whatever the outage's
# length. A pool passed in keeps its own settings.
RECONNECT_TIMEOUT = 1.5


def pool_conninfo(pool: ConnectionPool | AsyncConnectionPool) -> str:
    """The DSN of a pool, for the connections a worker opens beside it (LISTEN)."""
    if isinstance(pool.conninfo, str):
        return pool.conninfo
    raise TypeError("the pool's conninfo is a function; give the queue a DSN string instead")


def resolve_settings(pool: ConnectionPool | AsyncConnectionPool) -> tuple[str, dict[str, Any]]:
    """A pool's conninfo and connection keyword arguments, as it connects with
    them (a plain function that returns them is called)."""
    conninfo = pool.conninfo() if callable(pool.conninfo) else pool.conninfo
    kwargs = pool.kwargs() if callable(pool.kwargs) else pool.kwargs
    if not isinstance(conninfo, str) or not isinstance(kwargs, (dict, type(None))):
        raise TypeError(
            "the pool's conninfo or kwargs come from a coroutine function; give the worker "
            "listen_conninfo= for its LISTEN connection"
        )
    return conninfo, dict(kwargs or {})
