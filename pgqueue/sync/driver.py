"""The sync driver: `pgqueue.connection.blocking`, by the name the sync API knew it."""

from __future__ import annotations

from ..connection.blocking import (
    CallerConnection,
    Driver,
    PoolTarget,
    make_driver,
    make_pool,
    perform,
    probe_server,
    reconnect_now,
    run_on,
)
from ..connection.settings import (
    KEEPALIVES,
    RECONNECT_TIMEOUT,
    connection_kwargs,
    pool_conninfo,
    resolve_settings,
)

__all__ = [
    "KEEPALIVES",
    "RECONNECT_TIMEOUT",
    "CallerConnection",
    "Driver",
    "PoolTarget",
    "connection_kwargs",
    "make_driver",
    "make_pool",
    "perform",
    "pool_conninfo",
    "probe_server",
    "reconnect_now",
    "resolve_settings",
    "run_on",
]
