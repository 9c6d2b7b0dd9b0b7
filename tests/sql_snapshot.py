"""A snapshot of every SQL statement pgqueue renders, so that a change of SQL
shows up as a change of SQL in review.

For a few tables (the default with and without history, a schema-qualified
one, one whose names are as long as pgqueue allows): every statement of
`Statements`, every claim shape (`Statements.claim_for`), every shape of a
worker's turn (`Statements.turn`; for the default table, the fullest one
for the others), the migrations of a fresh install, and the seed design's
statements that ``pgqueue bench`` runs. One file per
table under ``tests/sql/``; `tests.test_sql_snapshot` fails on any
difference. After a change of SQL that is meant, write them again and say
in the commit which statement changed and why::

    python -m tests.sql_snapshot
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from pathlib import Path

from pgqueue.bench_sql import SeedStatements
from pgqueue.core.migrations import MIGRATIONS, REQUIRED_COLUMNS, SchemaNames
from pgqueue.core.plans import Plan, Query
from pgqueue.core.sql import Statements

__all__ = ["SNAPSHOTS", "render", "snapshot_path"]

DIRECTORY = Path(__file__).resolve().parent / "sql"
# (file name, table, history, every turn shape: else only the fullest)
SNAPSHOTS = (
    ("default", "pgqueue_jobs", False, True),
    ("default-history", "pgqueue_jobs", True, True),
    ("schema", "app.jobs", True, False),
    ("long-name", "s" * 63 + "." + "j" * 48, True, False),  # the longest names allowed
)
LIMIT = 20  # the claim's batch, spliced into its text


def snapshot_path(name: str) -> Path:
    return DIRECTORY / f"{name}.sql"


def _statements(table: str, history: bool, shapes: bool) -> Iterator[tuple[str, bytes]]:
    statements = Statements(table, history=history)
    for name, value in sorted(statements.every().items()):
        if isinstance(value, bytes):
            yield name, value
        elif isinstance(value, dict):
            for key, item in sorted(value.items(), key=lambda kv: str(kv[0])):
                if isinstance(item, bytes):
                    yield f"{name}[{key}]", item
    for queues, kinds, limited in itertools.product((False, True), repeat=3):
        claim = f"queues={queues} kinds={kinds} limited={limited}"
        yield f"claim_for({claim})", statements.claim_for(queues, kinds, LIMIT, limited)
    flags = ("queues", "kinds", "budget", "limited", "failures", "plain")
    every = itertools.product((False, True), repeat=len(flags))
    for values in every if shapes else [(True, True, True, True, True, False)]:
        shape = dict(zip(flags, values, strict=True))
        # A limit on the limited jobs changes one number: shown once.
        for limited_max in (None, 5) if all(values[:5]) else (None,):
            turn = statements.turn(
                shape["queues"],
                shape["kinds"],
                shape["budget"],
                LIMIT,
                shape["limited"],
                limited_max,
                failures=shape["failures"],
                plain=shape["plain"],
            )
            label = " ".join(f"{k}={v}" for k, v in shape.items())
            yield f"turn({label} limited_max={limited_max})", turn
    # With heads (`pgqueue.core.heads`), which change the claim of jobs
    # without a limit key only: the plain turn for each way of finding
    # queues and kinds.
    for queues, kinds in itertools.product((False, True), repeat=2) if shapes else ():
        turn = statements.turn(queues, kinds, False, LIMIT, False, failures=False, plain=True,
                               heads=True)  # fmt: skip
        yield f"turn(queues={queues} kinds={kinds} plain=True heads=True)", turn


def _migrations(table: str) -> Iterator[tuple[str, bytes]]:
    names = SchemaNames.for_table(table)
    for migration in MIGRATIONS:
        yield from _steps(f"migration {migration.version}", migration.apply(names))
        if migration.contract is not None:
            yield from _steps(f"migration {migration.version} contract", migration.contract(names))


def _steps(label: str, plan: Plan[None]) -> Iterator[tuple[str, bytes]]:
    n = 0
    try:
        step = next(plan)
        while True:
            if isinstance(step, Query):
                n += 1
                yield f"{label}, step {n}", step.query
            # What a fresh database answers: a queue's columns, nothing else.
            rows = list(REQUIRED_COLUMNS.items()) if b"pg_attribute" in step.query else []
            step = plan.send(rows)
    except StopIteration:
        pass


def _seed(table: str) -> Iterator[tuple[str, bytes]]:
    seed = SeedStatements(table)
    for name, value in sorted(vars(seed).items()):
        for i, item in enumerate(value if isinstance(value, tuple) else (value,)):
            if isinstance(item, bytes):
                yield f"seed.{name}" + (f"[{i}]" if isinstance(value, tuple) else ""), item


def render(table: str, history: bool, shapes: bool = True) -> str:
    """Every statement for one table, each under a ``-- ==== name`` line."""
    parts = [f"-- Every statement for table {table!r}, history={history}.\n"]
    for name, statement in itertools.chain(
        _statements(table, history, shapes), _migrations(table), _seed(table)
    ):
        parts.append(f"\n-- ==== {name}\n{statement.decode().strip()}\n")
    return "".join(parts)


def main() -> int:
    DIRECTORY.mkdir(exist_ok=True)
    for name, table, history, shapes in SNAPSHOTS:
        snapshot_path(name).write_text(render(table, history, shapes))
    print(f"wrote {len(SNAPSHOTS)} snapshots under {DIRECTORY}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
