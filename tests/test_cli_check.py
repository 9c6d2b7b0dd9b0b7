"""``pgqueue check TARGET`` against a real table: clean, then with jobs the
code cannot run (no handler; a payload that no longer binds). The queue
comes from the pytest plugin (``pgqueue_queue``)."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

import pgqueue
from pgqueue import cli

APP = """
from dataclasses import dataclass

import pgqueue

queue = pgqueue.Queue({dsn!r}, table={table!r})


@dataclass
class Refund:
    order_id: int
    amount: str


@queue.task(kind="shop.refund")
def refund(refund: Refund, *, note: str = "") -> None: ...


@queue.task(kind="shop.ship")
def ship(order_id: int) -> None: ...


worker = pgqueue.Worker(queue, {{"legacy": lambda job: None}})
"""


@pytest.fixture
def app(
    pgqueue_queue: pgqueue.Queue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """A module of the project naming the plugin's queue: its module name."""
    name = f"check_app_{pgqueue_queue.table}"
    source = APP.format(dsn=pgqueue_queue.conninfo, table=pgqueue_queue.table)
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PGQUEUE_DSN", raising=False)
    yield name
    loaded = sys.modules.pop(name, None)
    if loaded is not None:
        loaded.queue.close()


def check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    status = cli.main(["check", *args])
    return status, capsys.readouterr().out


def test_check_passes_a_table_whose_jobs_all_fit(
    pgqueue_queue: pgqueue.Queue, app: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pgqueue_queue.enqueue("shop.ship", {"args": [7]})
    pgqueue_queue.enqueue("shop.refund", {"args": [{"order_id": 1, "amount": "2"}]})

    status, out = check(capsys, f"{app}:queue")

    assert status == 0
    assert "2 jobs checked; every one can run on this code" in out


def test_check_reports_orphaned_and_stale_jobs_by_kind(
    pgqueue_queue: pgqueue.Queue, app: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ok = pgqueue_queue.enqueue("shop.ship", {"args": [7]})
    gone = [pgqueue_queue.enqueue("shop.old", {"n": n}) for n in range(3)]
    renamed = pgqueue_queue.enqueue("shop.ship", {"kwargs": {"order": 7}})
    retyped = pgqueue_queue.enqueue("shop.refund", {"args": [{"order_id": 1}]}, max_attempts=1)
    (claimed,) = pgqueue_queue.claim(1, worker="w", kinds=["shop.refund"])
    pgqueue_queue.fail(claimed, "boom")  # dead jobs are checked too

    status, out = check(capsys, f"{app}:queue", "--json", "--page-size", "2")

    assert status == 1
    report = json.loads(out)
    assert report["ok"] is False and report["checked"] == 6
    found = {(f["kind"], f["problem"]): f for f in report["findings"]}
    assert set(found) == {
        ("shop.old", "no handler"),
        ("shop.ship", "payload does not bind"),
        ("shop.refund", "payload does not bind"),
    }
    assert found["shop.old", "no handler"]["count"] == 3
    assert found["shop.old", "no handler"]["sample_ids"] == gone
    assert found["shop.ship", "payload does not bind"]["sample_ids"] == [renamed]
    assert "order" in found["shop.ship", "payload does not bind"]["detail"]
    refund = found["shop.refund", "payload does not bind"]
    assert refund["sample_ids"] == [retyped] and refund["statuses"] == {"dead": 1}
    assert "field refund.amount: missing" in refund["detail"]
    assert ok not in [i for f in report["findings"] for i in f["sample_ids"]]


def test_check_of_a_worker_counts_its_handlers_and_the_queues_tasks(
    pgqueue_queue: pgqueue.Queue, app: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pgqueue_queue.enqueue("legacy", {"anything": True})
    pgqueue_queue.enqueue("shop.ship", {"args": [7]})
    pgqueue_queue.enqueue("gone")

    assert check(capsys, f"{app}:queue")[0] == 1  # the queue's tasks know no legacy
    status, out = check(capsys, f"{app}:worker")

    assert status == 1
    assert "1 of 3 jobs checked cannot run on this code" in out
    assert "gone" in out and "no handler" in out


def test_check_gives_up_on_a_page_after_its_statement_timeout(
    pgqueue_queue: pgqueue.Queue,
    pgqueue_dsn: str,
    app: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pgqueue_queue.enqueue("shop.ship", {"args": [7]})
    with psycopg.connect(pgqueue_dsn) as locker:
        # A migration holding the table: the check's read would wait for it.
        locker.execute(
            sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
                sql.Identifier(pgqueue_queue.table)
            )
        )
        status = cli.main(["check", f"{app}:queue", "--statement-timeout", "200"])
        locker.rollback()

    assert status == 1
    assert "statement timeout" in capsys.readouterr().err
