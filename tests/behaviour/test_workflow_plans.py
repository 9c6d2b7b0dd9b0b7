"""The statements of workflows read the queue table by its primary key, by
EXPLAIN, on a table of 200,000 jobs (a few hundred thousand rather than the
issue's million, to keep the suite quick: the plans do not change with the
count).

A success releases its dependents, and a death or a cancel deletes what
waits below it, without reading the table's other rows: their plans never
scan the queue table. The claim's side (200,000 waiting jobs cost it
nothing) is in tests/behaviour/test_claim_plans.py. The plan is the
server's, not the driver's: this module runs once, whatever the backend.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pgqueue import JobSpec
from pgqueue.core.ops import QueueCore
from pgqueue.core.plans import Query
from pgqueue.core.states import Event
from pgqueue.sync.driver import run_on

from ..conftest import Raw

ROWS = 200_000


@pytest.fixture(scope="module")
def big(dsn: str) -> Iterator[tuple[psycopg.Connection[Any], QueueCore, dict[str, int]]]:
    """A table of ROWS pending jobs, a running parent with a waiting child
    and grandchild, and a second running parent (to die)."""
    name = f"wfplans_{uuid.uuid4().hex[:10]}"
    core = QueueCore(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        run_on(conn, core.install())
        raw = Raw(conn, name)
        raw.rows("ALTER TABLE {table} SET (autovacuum_enabled = off)")
        raw.rows("INSERT INTO {table} (kind) SELECT 'filler' FROM generate_series(1, %s)", ROWS)
        ids: dict[str, int] = {}
        for parent in ("parent", "doomed"):
            ids[parent] = run_on(conn, core.enqueue(JobSpec(parent, max_attempts=1)))
            child = JobSpec("c", depends_on=[ids[parent]])
            ids[f"{parent}_child"] = run_on(conn, core.enqueue(child))
            ids[f"{parent}_grandchild"] = run_on(
                conn, core.enqueue(JobSpec("g", depends_on=[ids[f"{parent}_child"]]))
            )
        raw.rows(
            "UPDATE {table} SET status = 'running', attempts = 1, locked_by = 'w',"
            " locked_at = now() WHERE id = ANY(%s)",
            [ids["parent"], ids["doomed"]],
        )
        raw.rows("VACUUM ANALYZE {table}")
        try:
            yield conn, core, ids
        finally:
            run_on(conn, core.uninstall())


def plan_of(conn: psycopg.Connection[Any], step: Query) -> dict[str, Any]:
    """The statement's plan, run and rolled back."""
    with conn.transaction(force_rollback=True):
        cur = conn.execute(b"EXPLAIN (ANALYZE, FORMAT JSON) " + step.query, step.params)
        ((doc,),) = cur.fetchall()
    return dict(doc[0]["Plan"])


def scans(node: dict[str, Any]) -> list[tuple[str, str]]:
    """(node type, relation) of every scan in the plan."""
    found = [(node["Node Type"], node.get("Relation Name", ""))] if "Relation Name" in node else []
    for child in node.get("Plans", []):
        found += scans(child)
    return found


def test_a_success_releases_its_dependents_without_scanning_the_table(big: Any) -> None:
    conn, core, ids = big
    step = next(core.complete([ids["parent"]]).plan)
    assert isinstance(step, Query)
    plan = plan_of(conn, step)
    assert ("Seq Scan", core.table) not in scans(plan), json.dumps(plan)[:2000]


def test_a_death_cancels_what_waits_below_without_scanning_the_table(big: Any) -> None:
    conn, core, ids = big
    [job] = [j for j in run_on(conn, core.jobs(status="running")) if j.id == ids["doomed"]]
    failure = core.failure(job, "boom", retry_in=timedelta(0), event=Event.FAIL)
    step = next(core.record_failures([failure]).plan)
    assert isinstance(step, Query)
    plan = plan_of(conn, step)
    assert ("Seq Scan", core.table) not in scans(plan), json.dumps(plan)[:2000]
