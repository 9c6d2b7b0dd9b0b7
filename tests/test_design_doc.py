"""The SQL that docs/design.md shows is the SQL the code runs (no database needed).

Every statement in a ```sql block of the page, once comments are dropped
and whitespace is collapsed, must be one that `pgqueue.core.sql.Statements`
renders for the default table, or one that the migrations run on a fresh
install (their expand and contract halves). A statement edited in the code
and not in the page fails here.

The pages of cancellation, results and limits are held to the same rule,
and may also show a part of a statement: a block whose first line is a
``-- part of ...`` comment must appear, word for word, in one of them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pgqueue.core.migrations import MIGRATIONS, REQUIRED_COLUMNS, SchemaNames
from pgqueue.core.ops import Query
from pgqueue.core.sql import Statements

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGE = DOCS / "design.md"
# The pages whose SQL is checked here, with the least number of blocks each shows.
PAGES = {"design.md": 6, "cancel.md": 3, "results.md": 4, "limits.md": 6, "workflows.md": 4}
PART = "-- part of"


def normalize(text: str) -> str:
    text = re.sub(r"--[^\n]*", "", text)
    return " ".join(text.split()).rstrip(";").strip()


def code_statements() -> set[str]:
    found = {
        normalize(v.decode())
        for value in Statements("pgqueue_jobs").every().values()
        for v in (value.values() if isinstance(value, dict) else [value])
        if isinstance(v, bytes)
    }
    names = SchemaNames.for_table("pgqueue_jobs")
    halves = [m.apply for m in MIGRATIONS] + [m.contract for m in MIGRATIONS if m.contract]
    for half in halves:
        plan = half(names)
        try:
            step = next(plan)
            while True:
                if isinstance(step, Query):
                    found.add(normalize(step.query.decode()))
                # What a fresh database answers: a queue's columns, nothing else.
                rows = list(REQUIRED_COLUMNS.items()) if b"pg_attribute" in step.query else []
                step = plan.send(rows)
        except StopIteration:
            pass
    return found


def blocks(page: Path) -> list[str]:
    return re.findall(r"```sql\n(.*?)```", page.read_text(), flags=re.S)


def page_statements(page: Path = PAGE) -> list[str]:
    """The whole statements a page shows (its parts of statements aside)."""
    return [
        normalize(s)
        for block in blocks(page)
        if not block.lstrip().startswith(PART)
        for s in block.split(";\n")
        if normalize(s)
    ]


def page_parts(page: Path) -> list[str]:
    """The parts of statements a page shows (blocks that begin ``-- part of``)."""
    return [normalize(b) for b in blocks(page) if b.lstrip().startswith(PART)]


def test_the_page_shows_sql() -> None:
    assert len(page_statements()) >= 6


@pytest.mark.parametrize("statement", page_statements(), ids=lambda s: s[:40])
def test_each_statement_on_the_page_is_one_the_code_runs(statement: str) -> None:
    assert statement in code_statements()


@pytest.mark.parametrize(("name", "least"), PAGES.items())
def test_each_page_shows_only_sql_the_code_runs(name: str, least: int) -> None:
    page = DOCS / name
    whole, parts = page_statements(page), page_parts(page)
    assert len(blocks(page)) >= least
    rendered = code_statements()
    for statement in whole:
        assert statement in rendered, statement[:80]
    for part in parts:
        assert any(part in statement for statement in rendered), part[:80]
