"""``pgqueue cron list|pause|resume|trigger`` against the suite's real database.

In-process through `pgqueue.cli.main`, with the idioms of tests/test_cli_ops.py
(``PGQUEUE_DSN`` and ``PGQUEUE_TABLE`` name the test's database and table).
Schedules are registered as a worker registers them when it starts.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from psycopg.conninfo import make_conninfo

import pgqueue
from pgqueue.core.schedules import validate_schedule

from .conftest import Raw
from .test_cli_ops import (
    Cli,
    assert_one_line_failure,
    assert_usage_error,
    queue,
    run,
    snapshot,
)

__all__ = ["queue", "run"]  # fixtures, used by name


def register(q: pgqueue.Queue, kind: str, /, **options: object) -> None:
    q.register_schedules([validate_schedule(kind, **options)])


def test_cron_list_shows_each_schedule_with_its_next_tick(run: Cli, queue: pgqueue.Queue) -> None:
    assert run("cron", "list").lines == ["no schedules"]
    register(queue, "report", cron="0 3 * * *", tz="Europe/Berlin", queue="reports", priority=5)
    register(queue, "beat", every=timedelta(minutes=5), overlap=False, payload={"n": 1})
    ran = run("cron", "list")
    assert ran.code == 0, ran
    header, beat, report = ran.lines
    assert header.split()[:4] == ["NAME", "KIND", "SCHEDULE", "NEXT"]
    assert beat.split()[:4] == ["beat", "beat", "every", "5m"]
    assert "cron 0 3 * * * (Europe/Berlin)" in report and "reports" in report
    [beat_json, report_json] = run("cron", "list", "--json").json()
    assert beat_json["every_seconds"] == 300 and beat_json["overlap"] is False
    assert beat_json["payload"] == {"n": 1} and beat_json["next_tick"] is not None
    assert (report_json["cron"], report_json["tz"], report_json["priority"]) == (
        "0 3 * * *", "Europe/Berlin", 5,
    )  # fmt: skip


def test_cron_pause_and_resume_flip_the_schedules_pause(run: Cli, queue: pgqueue.Queue) -> None:
    register(queue, "report", cron="@daily")
    paused = run("cron", "pause", "report")
    assert (paused.code, paused.out) == (0, "schedule report paused\n")
    assert [s.paused for s in queue.schedules()] == [True]
    assert run("cron", "resume", "report", "--json").json() == {"name": "report", "paused": False}
    assert [s.paused for s in queue.schedules()] == [False]


def test_cron_trigger_enqueues_the_schedules_job_now(run: Cli, queue: pgqueue.Queue) -> None:
    register(queue, "report", cron="@daily", payload={"to": "ops"})
    ran = run("cron", "trigger", "report", "--json")
    assert ran.code == 0, ran
    job = queue.get(ran.json()["id"])
    assert job is not None and (job.kind, job.payload) == ("report", {"to": "ops"})


def test_cron_trigger_of_an_overlap_false_schedule_still_running_exits_1(
    run: Cli, queue: pgqueue.Queue, raw: Raw
) -> None:
    register(queue, "report", cron="@daily", overlap=False)
    first = run("cron", "trigger", "report")
    assert first.code == 0 and first.out.startswith("enqueued job "), first
    before = snapshot(raw)
    again = run("cron", "trigger", "report")
    assert_one_line_failure(again, "is still pending or running (overlap=False): nothing enqueued")
    assert snapshot(raw) == before


def test_cron_commands_on_an_unknown_schedule_exit_1(run: Cli, queue: pgqueue.Queue) -> None:
    for action in ("pause", "resume", "trigger"):
        assert_one_line_failure(run("cron", action, "nobody"), "no schedule named 'nobody'")


def test_cron_commands_without_a_name_or_with_an_empty_one_are_usage_errors(
    run: Cli, queue: pgqueue.Queue
) -> None:
    assert_usage_error(run("cron", "trigger"), "the following arguments are required: NAME")
    assert_usage_error(run("cron", "pause", ""), "schedule name must not be empty")


@pytest.mark.parametrize("override", ["concurrency", "kinds", "queues", "dsn"])
def test_a_worker_run_with_overrides_keeps_its_schedules_and_listeners(
    override: str, dsn: str, table: str
) -> None:
    from pgqueue.cli.worker import with_overrides

    seen: list[object] = []
    with pgqueue.Queue(dsn, table=table) as q:
        target = pgqueue.Worker(q, {"k": print})
        target.schedule("k", every=timedelta(minutes=5))
        target.add_event_listener(seen.append)
        changes: dict[str, Any] = {"dsn": None, "concurrency": None, "kinds": None}
        changes[override] = {
            "concurrency": 2,
            "kinds": ["k"],
            "queues": ["q"],
            "dsn": make_conninfo(dsn, application_name="other"),
        }[override]
        copy = with_overrides(target, **changes)
        assert isinstance(copy, pgqueue.Worker) and copy is not target
        assert list(copy._worker._schedules) == ["k"]
        assert copy._worker._event_listeners == [seen.append]
