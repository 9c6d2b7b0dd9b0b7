"""Plans: an operation's decisions as a generator, its I/O left to a backend.

A plan yields `Query` and `Copy` steps; the backend performs each on a
connection and sends back the rows; the plan's return value is the
operation's result. The sync backend and both async drivers run the very
same plans, so what to write and what follows from what was read is decided
once, in the core. This is psycopg's own trick (its ``generators.py``), one
level up.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .tracing import NO_TRACE, Trace

__all__ = [
    "Copy",
    "Operation",
    "Plan",
    "Query",
    "Rows",
    "Step",
    "drive",
    "execute",
    "fetch",
    "first_count",
    "needs_transaction",
]

T = TypeVar("T")
Rows = list[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class Query:
    """Run one statement; the plan receives its rows (empty if it returns none)."""

    query: bytes
    params: Sequence[Any] | dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Copy:
    """Send ``data`` (COPY text format) to ``COPY ... FROM STDIN``; the plan receives []."""

    query: bytes
    data: bytes


Step = Query | Copy
Plan = Generator[Step, Rows, T]


@dataclass(frozen=True, slots=True)
class Operation(Generic[T]):
    """A plan, whether its steps must share one transaction, and its trace
    (an enqueue's span, which the queue enters around the I/O; see
    `pgqueue.core.tracing`)."""

    plan: Plan[T]
    atomic: bool = False
    trace: Trace = NO_TRACE


def needs_transaction(op: Operation[Any], *, autocommit: bool, idle: bool) -> bool:
    """Whether to wrap `op` in ``conn.transaction()`` on a connection in this state.

    A multi-step plan must be atomic. In autocommit mode ``transaction()``
    gives that (BEGIN ... COMMIT), and inside a transaction it gives a
    savepoint. On a connection that is not in autocommit mode and has not
    begun a transaction yet, psycopg's ``transaction()`` would begin *and
    commit* one behind the caller's back; there the plan's first statement
    opens the caller's own transaction, which is atomic already.
    """
    return op.atomic and (autocommit or not idle)


def drive(plan: Plan[T], perform: Callable[[Step], Any]) -> T:
    """Run a plan with a synchronous `perform(step) -> rows`."""
    try:
        step = next(plan)
        while True:
            step = plan.send(perform(step))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def fetch(statement: bytes, params: Any, read: Callable[[Rows], T]) -> Operation[T]:
    """The operation of one statement, its rows read by `read`."""

    def plan() -> Plan[T]:
        return read((yield Query(statement, params)))

    return Operation(plan())


def execute(statement: bytes, params: Any = None) -> Operation[None]:
    """The operation of one statement whose rows nobody reads."""
    return fetch(statement, params, _nothing)


def _nothing(rows: Rows) -> None:
    return None


def first_count(rows: Rows) -> int:
    """The first column of the one row a counting statement returns."""
    return int(rows[0][0])
