"""Rolling deploys: a migration only expands; what it replaces goes with its contract step.

The workers of the release before keep running while a deploy rolls out,
on a table this release migrated: each test installs an earlier release
from this repository's git history into a venv of its own (`tests.releases`,
kept between runs) and runs its worker (`tests/old_release_app.py`) against
the table. Its claims must read an index (``EXPLAIN`` of the very statements
it sends, with their parameters, on a backlog large enough for the planner
to choose: what each reads under its ``FOR UPDATE SKIP LOCKED``) and it
must drain the table.

The releases, by commit:

- ``previous``: the commit this change was made on. When a release adds a
  migration, set it to the commit of the release before.
- ``before-7``: the last release before migration 7, whose claim reads the
  ready index that migration 7 once dropped at once.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pgqueue
from pgqueue.core.migrations import MIGRATIONS, SchemaNames

from .conftest import Raw
from .releases import ReleaseUnavailable, clean_environment, release_python
from .sql_snapshot import _steps

APP = Path(__file__).with_name("old_release_app.py")
RELEASES = {
    "previous": "347bf606df6255845dceee4ba5731d8b9101454d",
    "before-7": "d46be7ee42d540c61479e276474d194ce8b6274d",
}
# Jobs each release enqueues: with twice as many pending, the planner reads
# an index for a claim when one serves it.
BACKLOG = 1_000


def old_python(name: str) -> Path:
    """The interpreter of release ``name``; skipped without git history or
    PyPI (failed in CI, where both must be at hand)."""
    try:
        return release_python(RELEASES[name])
    except (ReleaseUnavailable, RuntimeError) as exc:
        note = f"release {name} ({RELEASES[name][:12]}) unavailable: {exc}"
        if os.environ.get("CI"):
            pytest.fail(note)
        pytest.skip(note)


def run_old(python: Path, dsn: str, table: str, *args: str) -> Any:
    """Run the earlier release's side of the deploy; its JSON answer."""
    done = subprocess.run(
        [str(python), "-I", str(APP), dsn, table, *args],
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


def claim_scans(plan: Any, locking: bool = False) -> Iterator[dict[str, Any]]:
    """The nodes of an EXPLAIN (FORMAT JSON) plan that read the rows a claim
    locks: every relation read under a ``LockRows`` node (``FOR UPDATE SKIP
    LOCKED``)."""
    if isinstance(plan, dict):
        if locking and ("Relation Name" in plan or "Index Name" in plan):
            yield plan
        locking = locking or plan.get("Node Type") == "LockRows"
        for value in plan.values():
            yield from claim_scans(value, locking)
    elif isinstance(plan, list):
        for item in plan:
            yield from claim_scans(item, locking)


def claim_reads(explained: list[dict[str, Any]], table: str) -> list[str]:
    """How the explained claims read the queue table: ``Seq Scan``, or an index's name."""
    reads = []
    for statement in explained:
        for node in claim_scans(statement["plan"]):
            if node.get("Relation Name") == table and node["Node Type"] == "Seq Scan":
                reads.append("Seq Scan")
            elif str(node.get("Index Name", "")).startswith(f"{table}_"):
                reads.append(node["Index Name"])
    return reads


def deploy(name: str, dsn: str, table: str, raw: Raw) -> tuple[Path, list[int]]:
    """The earlier release installed the table and has a backlog; this one migrates
    (expand only) and enqueues too. Returns the old interpreter and every job's id."""
    python = old_python(name)
    run_old(python, dsn, table, "install")
    ids: list[int] = run_old(python, dsn, table, "enqueue", str(BACKLOG))
    with pgqueue.Queue(dsn, table=table) as q:
        q.install()
        ids += q.enqueue_many([("noop", i) for i in range(BACKLOG)])
    raw.rows("ANALYZE {table}")
    return python, ids


def drain_with_old_worker(python: Path, dsn: str, table: str, ids: list[int]) -> list[str]:
    """The earlier release's worker drains the table; how its claims read it."""
    drained = run_old(python, dsn, table, "drain")
    assert drained["pgqueue"].startswith(str(python.parents[1])), drained["pgqueue"]
    assert Counter(drained["ran"]) == Counter(ids)
    assert drained["explained"], "the worker sent no claim"
    return claim_reads(drained["explained"], table)


@pytest.mark.parametrize("release", list(RELEASES))
def test_an_earlier_releases_worker_claims_through_an_index_and_drains_a_migrated_table(
    release: str, dsn: str, table: str, raw: Raw
) -> None:
    python, ids = deploy(release, dsn, table, raw)
    reads = drain_with_old_worker(python, dsn, table, ids)
    assert reads, "no claim read the queue table"
    assert "Seq Scan" not in reads, reads
    assert raw.count() == 0


def test_the_contract_step_is_what_takes_the_old_workers_index_away(
    dsn: str, table: str, raw: Raw
) -> None:
    python, ids = deploy("before-7", dsn, table, raw)
    with pgqueue.Queue(dsn, table=table) as q:
        assert list(q.pending_contract()) == [7, 8]
        assert q.contract() == [7, 8]
        assert q.pending_contract() == {}
    raw.rows("ANALYZE {table}")
    # Too early: the release before migration 7 claims by a full scan now.
    reads = drain_with_old_worker(python, dsn, table, ids)
    assert "Seq Scan" in reads, reads
    assert raw.count() == 0


# What a migration's expand half must never say: it would take away what the
# release before it uses. (Widening a CHECK drops the old one: that is a
# DROP CONSTRAINT, which no release's statement reads.)
REMOVALS = re.compile(
    rb"\bDROP\s+(INDEX|TABLE|COLUMN|VIEW|FUNCTION|TRIGGER|SEQUENCE|SCHEMA|TYPE)\b"
    rb"|\bRENAME\b|\bALTER\s+COLUMN\s+\w+\s+(SET\s+DATA\s+)?TYPE\b",
    re.IGNORECASE,
)


@pytest.mark.parametrize("migration", MIGRATIONS, ids=lambda m: f"migration-{m.version}")
def test_a_migration_only_expands_and_leaves_removals_to_its_contract_step(
    migration: Any,
) -> None:
    names = SchemaNames.for_table("jobs")
    expand = [statement for _, statement in _steps("apply", migration.apply(names))]
    assert not [s for s in expand if REMOVALS.search(s)]
    if migration.contract is not None:
        contract = [statement for _, statement in _steps("contract", migration.contract(names))]
        assert contract and all(REMOVALS.search(s) for s in contract)
        assert migration.drops
