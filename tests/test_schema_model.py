"""The table model (`pgqueue.core.schema`) agrees with the server.

Each partial index is written once, as a predicate and columns
(`pgqueue.core.schema.predicates`); the migrations build it from there and
the statements splice in the same predicate. Here every index is compared
with what ``pg_get_indexdef`` shows of a migrated table, and with an index
built afresh from its predicate on a copy of that table.
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from pgqueue.core.ops import QueueCore
from pgqueue.core.schema.names import TableNames
from pgqueue.core.schema.predicates import (
    CLAIM_INDEX,
    CLAIMABLE,
    INDEXES,
    READY_INDEX,
    Index,
)
from pgqueue.core.sql import Statements
from pgqueue.sync.driver import run_on

from .conftest import Raw

SHOWN = "SELECT split_part(pg_get_indexdef(%s::regclass), ' USING ', 2)"


@pytest.fixture
def installed(server_dsn: str, table: str) -> TableNames:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        run_on(conn, QueueCore(table).install())
    return TableNames.for_table(table)


@pytest.mark.parametrize("index", INDEXES, ids=lambda i: i.suffix)
def test_every_index_of_a_migrated_table_is_the_one_its_predicate_defines(
    installed: TableNames, raw: Raw, index: Index
) -> None:
    name = installed.index_regclass(index.suffix)
    assert raw.one(SHOWN, name) == index.shown
    assert raw.one("SELECT indisunique FROM pg_index WHERE indexrelid = %s::regclass", name) is (
        index.unique
    )


def test_a_migrated_table_has_no_partial_index_the_model_does_not_know(
    installed: TableNames, raw: Raw
) -> None:
    rows = raw.rows(
        "SELECT c.relname FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid"
        " WHERE i.indrelid = %s::regclass AND i.indpred IS NOT NULL",
        installed.regclass,
    )
    assert sorted(r[0] for r in rows) == sorted(installed.index_name(i.suffix) for i in INDEXES)


@pytest.mark.parametrize("index", [*INDEXES, READY_INDEX, CLAIM_INDEX], ids=lambda i: i.suffix)
def test_an_index_built_from_its_predicate_is_shown_as_its_definition(
    installed: TableNames, raw: Raw, index: Index
) -> None:
    # A copy of the migrated table's columns, under another name: the
    # replaced indexes (ready, claim) are built there too.
    copy = TableNames.for_table(f"{installed.table_name}_copy")
    try:
        raw.conn.execute(sql.SQL("CREATE TABLE {} (LIKE {})").format(copy.table, installed.table))
        raw.conn.execute(index.create(copy))
        assert raw.one(SHOWN, copy.index_regclass(index.suffix)) == index.shown
    finally:
        raw.conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(copy.table))


def test_the_claim_says_what_the_claim_index_holds() -> None:
    # A partial index serves a query whose WHERE implies its predicate: the
    # claim's walk of the queues and levels names the index's, word for word.
    statements = Statements("pgqueue_jobs")
    for claim in (statements.claim, statements.claim_for(True, True, 20, False)):
        assert claim.decode().count(f"WHERE {CLAIMABLE}") >= 2
