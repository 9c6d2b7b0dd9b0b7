"""Enqueue in a SQLAlchemy 2 session's transaction: the job commits with the ORM's writes.

    from pgqueue.contrib.sqlalchemy import psycopg_connection

    with Session(engine) as session, session.begin():
        session.add(Order(item="teapot"))
        queue.enqueue("send_receipt", {"item": "teapot"}, conn=psycopg_connection(session))

The engine must use psycopg 3 (``postgresql+psycopg://``). The helpers
return the psycopg connection under the session's current transaction
(beginning it if none is open yet, as ``session.connection()`` does), so
`Queue.enqueue` and `AsyncQueue.enqueue` write the job in that transaction:
``session.commit()`` commits both, ``session.rollback()`` (or an exception
leaving ``session.begin()``) leaves neither. Call the helper in each
transaction: after a commit or rollback, the next call begins the next one.
See docs/frameworks.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session, scoped_session

if TYPE_CHECKING:
    # Not at run time: SQLAlchemy's asyncio extension needs greenlet, which sync users may lack.
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session

__all__ = ["async_psycopg_connection", "psycopg_connection"]


def psycopg_connection(
    session: Session | scoped_session[Any] | Connection,
) -> psycopg.Connection[Any]:
    """The `psycopg.Connection` under ``session`` (a ``Session``, a
    ``scoped_session`` such as Flask-SQLAlchemy's ``db.session``, or a Core
    ``Connection``), in its current transaction: pass it as ``conn=`` to a
    `pgqueue.Queue`.

    Raises `TypeError` for anything else, or for an engine that does not
    use psycopg 3, before anything is written.
    """
    if isinstance(session, scoped_session):
        session = session()
    if isinstance(session, Session):
        connection = session.connection()
    elif isinstance(session, Connection):
        connection = session
        if not connection.in_transaction():
            connection.begin()  # as the connection's next statement would: commit() ends it
    else:
        raise TypeError(
            f"expected a sqlalchemy Session or Connection, not {type(session).__name__}"
        )
    _check_dialect(connection.dialect.name, connection.dialect.driver)
    raw = connection.connection.driver_connection
    if not isinstance(raw, psycopg.Connection):
        raise TypeError(f"the session's connection is a {type(raw).__name__}, not psycopg's")
    return raw


async def async_psycopg_connection(
    session: AsyncSession | async_scoped_session[Any] | AsyncConnection,
) -> psycopg.AsyncConnection[Any]:
    """The `psycopg.AsyncConnection` under ``session`` (an ``AsyncSession``,
    an ``async_scoped_session`` or an ``AsyncConnection``), in its current
    transaction: pass it as ``conn=`` to a `pgqueue.AsyncQueue`.

    SQLAlchemy's asyncio extension runs on asyncio only, and so does this.
    Raises `TypeError` for anything else, or for an engine that does not
    use psycopg 3, before anything is written.
    """
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session

    if isinstance(session, async_scoped_session):
        session = session()
    if isinstance(session, AsyncSession):
        connection = await session.connection()
    elif isinstance(session, AsyncConnection):
        connection = session
        if not connection.in_transaction():
            await connection.begin()
    else:
        raise TypeError(
            f"expected a sqlalchemy AsyncSession or AsyncConnection, not {type(session).__name__}"
        )
    _check_dialect(connection.dialect.name, connection.dialect.driver)
    raw = (await connection.get_raw_connection()).driver_connection
    if not isinstance(raw, psycopg.AsyncConnection):
        raise TypeError(f"the session's connection is a {type(raw).__name__}, not psycopg's")
    return raw


def _check_dialect(name: str, driver: str) -> None:
    if name != "postgresql" or driver not in ("psycopg", "psycopg_async"):
        raise TypeError(
            f"pgqueue joins SQLAlchemy transactions on psycopg 3 only: the engine is "
            f"{name}+{driver}; use a postgresql+psycopg:// URL"
        )
