"""What every feature's statements are rendered against: one queue table.

A statement is a module-level template whose ``{table}``, ``{cols}``,
``{leaving}`` ... `Table.render` fills in; values always travel as
parameters. Statements are rendered to bytes once per table, so the hot path
neither composes nor escapes anything, and psycopg can prepare them by text.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any, Self

from psycopg import sql

from ..schema.columns import HISTORY_COLUMNS, INSERT_COLUMNS, LEAVING_COLUMNS, job_columns
from ..schema.names import TableNames

__all__ = ["FeatureStatements", "Rendered", "Table", "cte", "history_copy"]


@dataclass(frozen=True)
class Table:
    """A queue table, and whether the jobs that leave it are copied to its history.

    >>> Table.named("app.jobs").render("SELECT id FROM {table} WHERE id = %s")
    b'SELECT id FROM "app"."jobs" WHERE id = %s'
    """

    names: TableNames
    history: bool = False

    @classmethod
    def named(cls, table: str, *, history: bool = False) -> Table:
        return cls(TableNames.for_table(table), history)

    @cached_property
    def parts(self) -> dict[str, sql.Composable]:
        """What a template may name, beyond its own parts."""
        n = self.names
        # What a delete returns: the ids, and what the history copies.
        gone = HISTORY_COLUMNS if self.history else ("id",)
        leaving = gone + tuple(c for c in LEAVING_COLUMNS if c not in gone)
        but_error = _of_j(c for c in leaving if c != "last_error")
        return {
            "table": n.table,
            "cols": job_columns(),
            "jcols": job_columns("j"),
            "insert_cols": sql.SQL(", ").join(sql.Identifier(c) for c in INSERT_COLUMNS),
            "history": n.history,
            "queues": n.queues,
            "leases": n.unique_leases,
            "schedules": n.schedules,
            "results": n.results,
            "limits": n.limits,
            "slots": n.limit_slots,
            "dependencies": n.dependencies,
            "results_channel": sql.Literal(n.results_channel),
            "jobs_channel": sql.Literal(n.channel),
            # The claim index, as a regclass literal: the turn reports how
            # many of its entries the transaction read (`pgqueue.core.heads`).
            "unlimited_index": sql.Literal(n.index_regclass("unlimited")),
            "gone": sql.SQL(", ").join(sql.Identifier(c) for c in gone),
            "leaving": sql.SQL(", ").join(sql.Identifier(c) for c in leaving),
            "leaving_j": _of_j(leaving),
            # The same, for a job whose worker reported why it ended
            # (failures): the reason is what history and results keep.
            "leaving_f": but_error
            + sql.SQL(",\n              COALESCE(f.error, j.last_error) AS last_error"),
            # The same, for a job cancelled with a job it waited for: the
            # statement gives the reason (`pgqueue.core.queue.depends`).
            "leaving_but_error": but_error,
        }

    def compose(self, template: str, **parts: sql.Composable) -> sql.Composable:
        """`template` with the table's parts and `parts` filled in."""
        return sql.SQL(template).format(**{**self.parts, **parts})

    def render(self, template: str, **parts: sql.Composable) -> bytes:
        """`compose`, as the bytes sent to the server."""
        return self.compose(template, **parts).as_bytes(None)

    def history_copy(self, source: str, outcome: str) -> sql.Composable:
        """`history_copy` into this table's history, if it keeps one."""
        return history_copy(self.names.history if self.history else None, source, outcome)


def _of_j(columns: Iterable[str]) -> sql.Composable:
    """Columns of the row ``j``, as a select list."""
    return sql.SQL(", ").join(sql.Identifier("j", c) for c in columns)


def cte(source: str, part: str) -> sql.Composable:
    """The name of a CTE of the statement that ends jobs: ``part`` of the
    jobs of CTE ``source`` (``done_freed``, ``failed_rows_results``)."""
    return sql.SQL("{}_{}").format(sql.SQL(source), sql.SQL(part))


def history_copy(history: sql.Identifier | None, source: str, outcome: str) -> sql.Composable:
    """A CTE that copies the rows of CTE `source` into the history table (or nothing).

    Appended after `source` in a ``WITH``: the copy is written by the same
    statement as the delete, so a job is never in both tables or in neither.
    """
    if history is None:
        return sql.SQL("")
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in HISTORY_COLUMNS)
    return sql.SQL(
        ",\n{kept} AS (INSERT INTO {history} ({cols}, outcome)"
        " SELECT {cols}, {outcome} FROM {source})"
    ).format(
        kept=sql.Identifier(f"{source}_kept"),
        history=history,
        cols=cols,
        outcome=sql.Literal(outcome),
        source=sql.Identifier(source),
    )


class FeatureStatements:
    """The statements of one feature for one table: a frozen dataclass whose
    fields are its statements. `of` renders each field from the module-level
    template of its name in capitals (``set_paused`` from ``SET_PAUSED``;
    bytes are taken as they are), except those `special` renders."""

    __slots__ = ()

    @classmethod
    def special(cls, t: Table) -> dict[str, Any]:
        """The fields rendered otherwise (by shape, or with parts of their own)."""
        return {}

    @classmethod
    def of(cls, t: Table) -> Self:
        module = sys.modules[cls.__module__]
        given = cls.special(t)
        values = {
            f.name: given[f.name]
            if f.name in given
            else _rendered(t, getattr(module, f.name.upper()))
            for f in fields(cls)  # type: ignore[arg-type]
        }
        return cls(**values)


def _rendered(t: Table, template: str | bytes) -> bytes:
    return template if isinstance(template, bytes) else t.render(template)


class Rendered:
    """Statements rendered on demand (claims and turns, by shape and batch
    size), kept by their frozen spec; at most `most` of them, past which
    they are rendered anew."""

    def __init__(self, most: int = 256) -> None:
        self.most = most
        self._kept: dict[Hashable, bytes] = {}

    def get(self, key: Hashable, render: Callable[[], bytes]) -> bytes:
        statement = self._kept.get(key)
        if statement is None:
            if len(self._kept) >= self.most:
                self._kept.clear()
            statement = self._kept[key] = render()
        return statement
