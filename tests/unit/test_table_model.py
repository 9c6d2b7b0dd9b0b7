"""The table model and the statements built on it, below the database.

`tests/test_schema_model.py` checks the indexes against a real server;
here, what can be checked from the text: one set of names, one list of
leaving steps, one render per spec.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from psycopg import sql

from pgqueue.core.jobs import Job
from pgqueue.core.queue import leaving
from pgqueue.core.queue.claim import ClaimSpec
from pgqueue.core.queue.leaving import Leaving
from pgqueue.core.queue.table import Table
from pgqueue.core.schema.columns import JOB_COLUMNS
from pgqueue.core.schema.names import TableNames
from pgqueue.core.schema.predicates import CLAIMABLE, INDEXES, ORPHANED
from pgqueue.core.sql import Statements

PACKAGE = Path(__file__).resolve().parents[2] / "pgqueue"


def test_side_tables_live_in_the_schema_of_the_queue_and_indexes_are_named_without_it() -> None:
    names = TableNames.for_table("app.jobs")
    assert names.history.as_string() == '"app"."jobs_history"'
    assert names.limit_slots.as_string() == '"app"."jobs_limit_slots"'
    assert names.unlimited_index.as_string() == '"jobs_unlimited"'
    assert names.index_regclass("unlimited") == '"app"."jobs_unlimited"'
    assert names.versions_regclass == '"app"."pgqueue_schema"'


def test_a_long_table_name_keeps_every_channel_within_an_identifier() -> None:
    names = TableNames.for_table("s" * 63 + "." + "j" * 48)
    channels = {names.channel, names.control_channel, names.results_channel}
    assert len(channels) == 3
    assert all(len(c) <= 63 for c in channels)


def test_every_statement_names_the_tables_of_its_queue_in_its_schema() -> None:
    for name, statement in Statements("app.jobs", history=True).every().items():
        for text in statement.values() if isinstance(statement, dict) else [statement]:
            assert b'"pgqueue_jobs' not in text, name
            # A side table is named with its schema, as the queue table is.
            assert text.count(b'"jobs_') == text.count(b'"app"."jobs_'), name


@pytest.mark.parametrize("index", INDEXES, ids=lambda i: i.suffix)
def test_each_index_is_created_with_its_predicate_word_for_word(index: object) -> None:
    from pgqueue.core.schema.predicates import Index

    assert isinstance(index, Index)
    create = index.create(TableNames.for_table("pgqueue_jobs")).decode()
    assert create.endswith(f"WHERE {index.predicate}")
    assert f'"pgqueue_jobs_{index.suffix}"' in create


def test_the_claim_and_the_orphan_claim_say_what_their_indexes_hold() -> None:
    statements = Statements("pgqueue_jobs")
    assert statements.claim.decode().count(f"WHERE {CLAIMABLE}") >= 2
    for orphan in statements.claims.orphan_claims.values():
        assert ORPHANED.as_string().encode() in orphan


def test_a_claim_is_rendered_once_per_spec_and_the_spec_is_its_key() -> None:
    statements = Statements("pgqueue_jobs")
    first = statements.claim_for(True, False, 7)
    assert statements.claim_for(True, False, 7) is first
    assert statements.claim_for(True, False, 8) != first
    assert b"LIMIT 7" in first
    assert ClaimSpec(queues=True, limit=7) == ClaimSpec(queues=True, limit=7)
    assert len({ClaimSpec(limit=7), ClaimSpec(limit=7), ClaimSpec(limit=8)}) == 2


def test_the_render_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Statements, "RENDERED_MAX", 3)
    statements = Statements("pgqueue_jobs")
    for limit in range(1, 10):
        statements.claim_for(False, False, limit)
    assert len(statements._rendered._kept) <= 3


def test_a_new_leaving_step_reaches_every_statement_that_ends_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The one list: a step added there is in the success, the failures
    # (both the retried and the cancelled), the cancel and the worker's turn.
    def release_dependents(t: Table, left: Leaving) -> sql.Composable:
        return sql.SQL(f",\n{left.source}_released AS (SELECT 1)")

    monkeypatch.setattr(leaving, "LEAVING_STEPS", (*leaving.LEAVING_STEPS, release_dependents))
    statements = Statements("pgqueue_jobs", history=True)
    outcomes = statements.outcomes
    assert b"done_released" in outcomes.complete
    assert b"failed_rows_released" in outcomes.record_failures
    assert b"cancelled_released" in outcomes.record_failures
    assert b"cancelled_released" in outcomes.cancel
    turn = statements.turn(True, True, True, 20)
    for source in (b"done", b"failed_rows", b"cancelled"):
        assert source + b"_released" in turn
    # A plain success holds no slot and keeps no result: only history applies.
    plain = statements.turn(False, False, False, 20, plain=True, failures=False)
    assert b"done_released" not in plain
    assert b"done_kept" in plain


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            found.add(base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_the_async_api_imports_nothing_from_the_sync_one() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(i for i in _imports(path) if "sync" in i.split("."))
        for path in (PACKAGE / "aio").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_core_does_no_io() -> None:
    io = {"psycopg_pool", "anyio", "asyncio", "threading", "trio"}
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(i for i in _imports(path) if i.split(".")[0] in io)
        for path in (PACKAGE / "core").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_worker_reaches_the_queue_through_its_protocol_only() -> None:
    # calls.py is the protocol, and QueueCalls there makes it of an AsyncQueue.
    for path in (PACKAGE / "aio" / "worker").rglob("*.py"):
        if path.name == "calls.py":
            continue
        assert not re.search(r"(?<!\w)queue\.core\b", path.read_text()), path.name


def test_the_job_columns_are_read_in_the_order_of_the_fields_of_a_job() -> None:
    # `Job.from_row` (and `Job.from_json` through it) builds a job positionally.
    assert [f.name for f in dataclasses.fields(Job)] == list(JOB_COLUMNS)
    row = Job.from_json(
        [7, "k", {"a": 1}, 1, 3, "running", "2026-12-04T10:00:00+00:00", None, "w",
         "2026-12-04T10:00:01+00:00", "2026-12-04T09:00:00+00:00", "q", 5, None, 2.5, "key",
         False, None, {"3": None}]
    )  # fmt: skip
    assert (row.id, row.queue, row.priority, row.limit_key) == (7, "q", 5, "key")
    assert row.locked_at == datetime(2026, 12, 4, 10, 0, 1, tzinfo=UTC)
    assert (row.result_ttl, row.parents) == (timedelta(seconds=2.5), {3: None})
