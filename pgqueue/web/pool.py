"""The dashboard's own pool: autocommit connections with its session settings."""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from ..core.dashboard import READ_ONLY_SETTINGS, SESSION_SETTINGS
from ..sync.driver import connection_kwargs

__all__ = ["dashboard_pool"]


def dashboard_pool(conninfo: str, max_size: int, *, read_only: bool) -> ConnectionPool:
    """A pool of autocommit connections with the dashboard's session settings."""
    given = conninfo_to_dict(conninfo)
    chosen = {**SESSION_SETTINGS, **(READ_ONLY_SETTINGS if read_only else {})}
    settings = " ".join(f"-c {k}={v}" for k, v in chosen.items() if k != "application_name")
    options = f"{given.get('options', '')} {settings}".strip()
    kwargs = {
        **connection_kwargs(conninfo),
        "options": options,
        "application_name": SESSION_SETTINGS["application_name"],
        # Plans are made for each statement's values: a partial index's
        # predicate can then be proven, and no generic plan is cached.
        "prepare_threshold": None,
    }
    return ConnectionPool(
        conninfo, min_size=1, max_size=max_size, kwargs=kwargs, open=False,
        name="pgqueue-dashboard",
    )  # fmt: skip
