"""The SQL that docs/design.md shows is the SQL the code runs (no database needed).

Every statement in a ```sql block of the page, once comments are dropped
and whitespace is collapsed, must be one that `pgqueue.core.sql.Statements`
renders for the default table, or one that the migrations run on a fresh
install. A statement edited in the code and not in the page fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pgqueue.core.migrations import MIGRATIONS, REQUIRED_COLUMNS, SchemaNames
from pgqueue.core.ops import Query
from pgqueue.core.sql import Statements

PAGE = Path(__file__).resolve().parent.parent / "docs" / "design.md"


def normalize(text: str) -> str:
    text = re.sub(r"--[^\n]*", "", text)
    return " ".join(text.split()).rstrip(";").strip()


def code_statements() -> set[str]:
    found = {
        normalize(value.decode())
        for value in vars(Statements("pgqueue_jobs")).values()
        if isinstance(value, bytes)
    }
    names = SchemaNames.for_table("pgqueue_jobs")
    for migration in MIGRATIONS:
        plan = migration.apply(names)
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


def page_statements() -> list[str]:
    blocks = re.findall(r"```sql\n(.*?)```", PAGE.read_text(), flags=re.S)
    return [normalize(s) for block in blocks for s in block.split(";\n") if normalize(s)]


def test_the_page_shows_sql() -> None:
    assert len(page_statements()) >= 6


@pytest.mark.parametrize("statement", page_statements(), ids=lambda s: s[:40])
def test_each_statement_on_the_page_is_one_the_code_runs(statement: str) -> None:
    assert statement in code_statements()
