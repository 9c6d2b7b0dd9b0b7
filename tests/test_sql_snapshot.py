"""Every statement pgqueue renders is the one in ``tests/sql/`` (no database needed).

A change of SQL fails here until the snapshot is written again
(``python -m tests.sql_snapshot``), so that it shows up in review as a
change of SQL, and its commit says which statement changed and why.
"""

from __future__ import annotations

import difflib

import pytest

from .sql_snapshot import SNAPSHOTS, render, snapshot_path


@pytest.mark.parametrize(
    ("name", "table", "history", "shapes"), SNAPSHOTS, ids=lambda v: str(v)[:20]
)
def test_every_statement_is_the_one_in_the_snapshot(
    name: str, table: str, history: bool, shapes: bool
) -> None:
    path = snapshot_path(name)
    rendered = render(table, history, shapes)
    stored = path.read_text() if path.exists() else ""
    if rendered != stored:
        diff = difflib.unified_diff(
            stored.splitlines(), rendered.splitlines(), str(path), "rendered now", lineterm="", n=2
        )
        shown = "\n".join(list(diff)[:80])
        pytest.fail(
            f"the SQL differs from {path.name} (if meant: python -m tests.sql_snapshot, and say "
            f"in the commit which statement changed and why):\n{shown}"
        )
