"""The ``pgqueue`` command and job control: ``cancel``, ``result``, ``limits``
(list and set), and ``enqueue --result-ttl --limit-key``.

They run in-process through `pgqueue.cli.main`, as in tests/test_cli_ops.py
(whose fixtures and helpers they use), against the suite's real database.
"""

from __future__ import annotations

from datetime import timedelta

import pgqueue
from pgqueue import JobStatus

from .conftest import Raw
from .test_cli_ops import (
    Cli,
    assert_one_line_failure,
    assert_usage_error,
    bury,
    queue,
    run,
    snapshot,
)

__all__ = ["queue", "run"]  # fixtures, used by name

KEEP = timedelta(hours=1)

# -- cancel -------------------------------------------------------------------------


def test_cancel_removes_waiting_and_dead_jobs_and_asks_running_ones_to_stop(
    run: Cli, queue: pgqueue.Queue
) -> None:
    dead = bury(queue, "x")
    running = queue.enqueue("long")
    queue.claim(1, kinds=["long"], worker="w")
    pending = queue.enqueue("later", delay=KEEP)

    ran = run("cancel", str(pending), str(running), str(dead))
    assert ran.code == 0, ran
    assert ran.err == ""
    assert ran.lines == [
        f"removed 2 jobs (waiting or dead): {dead}, {pending}",
        f"asked 1 running job to stop: {running} (its worker stops it; it is never retried)",
    ]
    [job] = queue.jobs()
    assert (job.id, job.status, job.cancel_requested) == (running, JobStatus.RUNNING, True)
    assert queue._heartbeat([running], worker="w").cancel == [running]


def test_cancel_json_and_ids_not_in_the_queue_exit_1(run: Cli, queue: pgqueue.Queue) -> None:
    pending = queue.enqueue("k")
    gone = pending + 100

    ran = run("cancel", str(pending), str(gone), "--json")
    assert ran.code == 1, ran
    assert ran.json() == {
        "deleted": [pending],
        "requested": [],
        "not_found": [gone],
        "dependents": 0,
    }
    assert ran.err == (
        f"pgqueue cancel: job {gone} not cancelled: not in {queue.table} "
        "(it finished, or never existed)\n"
    )
    assert queue.jobs() == []

    again = run("cancel", str(pending))
    assert again.code == 1
    assert again.out == "nothing cancelled\n"


def test_cancel_of_bad_ids_is_a_usage_error(run: Cli, queue: pgqueue.Queue, raw: Raw) -> None:
    queue.enqueue("k")
    before = snapshot(raw)
    assert_usage_error(run("cancel"), "the following arguments are required: ID")
    assert_usage_error(run("cancel", "1", "x"), "not a job id: 'x'")
    assert_usage_error(run("cancel", "0"), "not a job id: '0'")
    assert snapshot(raw) == before


# -- result -------------------------------------------------------------------------


def test_result_of_a_succeeded_job_prints_its_value(run: Cli, queue: pgqueue.Queue) -> None:
    job_id = queue.enqueue("total", result_ttl=KEEP)
    queue.claim(1, worker="w")
    queue._settle([job_id], [], worker="w", results={job_id: '{"total": 3, "ok": true}'})

    ran = run("result", str(job_id))
    assert ran.code == 0, ran
    assert ran.lines[0].startswith(f"job {job_id}: succeeded at ")
    # As jsonb keeps it: its own order of keys.
    assert ran.lines[1:] == ["value:", "  {", '    "ok": true,', '    "total": 3', "  }"]
    data = run("result", str(job_id), "--json").json()
    assert data["finished_at"] is not None
    assert {k: v for k, v in data.items() if k != "finished_at"} == {
        "id": job_id,
        "outcome": "succeeded",
        "finished": True,
        "value": {"total": 3, "ok": True},
        "error": None,
    }


def test_result_of_pending_running_dead_and_cancelled_jobs(run: Cli, queue: pgqueue.Queue) -> None:
    pending = queue.enqueue("later", delay=KEEP, result_ttl=KEEP)
    running = queue.enqueue("long", result_ttl=KEEP)
    queue.claim(1, kinds=["long"], worker="w")
    dead = bury(queue, "x", "ValueError: no such order")

    assert run("result", str(pending)).out == f"job {pending}: pending (not finished)\n"
    assert run("result", str(running)).out == f"job {running}: running (not finished)\n"
    shown = run("result", str(dead))
    assert shown.lines == [f"job {dead}: dead", "error:", "  ValueError: no such order"]
    assert run("result", str(dead), "--json").json() == {
        "id": dead,
        "outcome": "dead",
        "finished": True,
        "value": None,
        "error": "ValueError: no such order",
        "finished_at": None,
    }

    queue.cancel(pending)
    cancelled = run("result", str(pending))
    assert cancelled.code == 0, cancelled
    assert cancelled.lines[0].startswith(f"job {pending}: cancelled at ")
    assert run("result", str(pending), "--json").json()["outcome"] == "cancelled"


def test_result_of_a_job_that_left_nothing_exits_1(run: Cli, queue: pgqueue.Queue) -> None:
    job_id = queue.enqueue("k")  # no result ttl
    queue.complete(*queue.claim(1, worker="w"))
    for args in ([str(job_id)], [str(job_id + 100), "--json"]):
        ran = run("result", *args)
        assert_one_line_failure(ran, f"no job {args[0]} in {queue.table} and no result kept")
        assert ran.out == ""


# -- limits -------------------------------------------------------------------------


def test_limits_lists_every_key_with_its_limit_running_and_waiting_jobs(
    run: Cli, queue: pgqueue.Queue
) -> None:
    ran = run("limits")
    assert (ran.code, ran.out) == (0, "no limits (no job has a limit key, and no limit was set)\n")
    assert run("limits", "--json").json() == []

    queue.set_limit("api", 5)
    queue.enqueue_many([pgqueue.JobSpec("k", i, limit_key="acct:7") for i in range(3)])
    queue.claim(10, worker="w")

    listed = run("limits")
    assert listed.code == 0, listed
    assert listed.lines == [
        "KEY     LIMIT        RUNNING  WAITING  RATE",
        "acct:7  1 (default)        1        2  -",
        "api     5                  0        0  -",
    ]
    assert run("limits", "list").lines == listed.lines
    no_rate = {"per_second": None, "burst": None, "tokens": None}
    assert run("limits", "list", "--json").json() == [
        {"key": "acct:7", "max_running": 1, "set": False, "running": 1, "waiting": 2} | no_rate,
        {"key": "api", "max_running": 5, "set": True, "running": 0, "waiting": 0} | no_rate,
    ]


def test_limits_set_lets_that_many_run(run: Cli, queue: pgqueue.Queue) -> None:
    queue.enqueue_many([pgqueue.JobSpec("k", i, limit_key="api") for i in range(4)])
    assert len(queue.claim(10, worker="w")) == 1

    ran = run("limits", "set", "api", "3")
    assert ran.code == 0, ran
    assert ran.out == "limit api set: at most 3 running jobs (1 running, 3 waiting)\n"
    assert len(queue.claim(10, worker="w")) == 2

    held = run("limits", "set", "api", "0", "--json")
    assert held.json() == {
        "key": "api",
        "max_running": 0,
        "set": True,
        "running": 3,
        "waiting": 1,
        "per_second": None,
        "burst": None,
        "tokens": None,
    }
    assert queue.claim(10, worker="w") == []


def test_limits_rate_lets_that_many_start_a_second(run: Cli, queue: pgqueue.Queue) -> None:
    queue.set_limit("api", 10)
    queue.enqueue_many([pgqueue.JobSpec("k", i, limit_key="api") for i in range(4)])

    ran = run("limits", "rate", "api", "0.001", "--burst", "2")
    assert ran.code == 0, ran
    assert ran.out == (
        "limit api set: at most 10 running jobs, at most 0.001/s (burst 2) (0 running, 4 waiting)\n"
    )
    assert len(queue.claim(10, worker="w")) == 2
    assert queue.claim(10, worker="w") == []
    listed = run("limits")
    assert listed.lines == [
        "KEY  LIMIT  RUNNING  WAITING  RATE",
        "api  10           2        2  0.001/s (burst 2)",
    ]
    [state] = run("limits", "--json").json()
    assert (state["per_second"], state["burst"]) == (0.001, 2)
    assert 0 <= state["tokens"] < 1

    gone = run("limits", "rate", "api", "none", "--json")
    assert (gone.json()["per_second"], gone.json()["burst"]) == (None, None)
    assert len(queue.claim(10, worker="w")) == 2


def test_bad_limits_arguments_are_usage_errors_and_write_nothing(
    run: Cli, queue: pgqueue.Queue
) -> None:
    assert_usage_error(run("limits", "set", "api"), "limits set takes a KEY and N")
    assert_usage_error(run("limits", "set"), "limits set takes a KEY and N")
    assert_usage_error(run("limits", "set", "api", "-1"), "must be at least 0")
    assert_usage_error(run("limits", "set", "api", "many"), "not an integer: 'many'")
    assert_usage_error(run("limits", "set", "", "2"), "limit_key must not be empty")
    assert_usage_error(run("limits", "list", "api"), "to set a limit: pgqueue limits set KEY N")
    assert_usage_error(run("limits", "unset"), "invalid choice: 'unset'")
    assert_usage_error(run("limits", "rate", "api"), "limits rate takes a KEY and PER_SECOND")
    assert_usage_error(run("limits", "rate", "api", "fast"), "not a number: 'fast'")
    assert_usage_error(run("limits", "rate", "api", "0"), "per_second must be above 0")
    assert_usage_error(run("limits", "rate", "api", "5", "--burst", "0"), "burst must be from 1")
    assert_usage_error(run("limits", "rate", "api", "none", "--burst", "3"), "a burst needs a rate")
    assert_usage_error(run("limits", "set", "api", "3", "--burst", "3"), "--burst goes with a rate")
    assert queue.limits() == []


# -- enqueue --result-ttl --limit-key ---------------------------------------------


def test_enqueue_with_a_result_ttl_and_a_limit_key(run: Cli, queue: pgqueue.Queue) -> None:
    ran = run("enqueue", "sync", '{"a": 1}', "--result-ttl", "90", "--limit-key", "acct:7")
    assert ran.code == 0, ran
    [job] = queue.jobs()
    assert ran.out == f"enqueued job {job.id} (sync) under limit acct:7, its result kept 1m30s\n"
    assert (job.result_ttl, job.limit_key) == (timedelta(seconds=90), "acct:7")

    data = run("enqueue", "sync", "--result-ttl", "1h", "--limit-key", "acct:7", "--json").json()
    assert (data["limit_key"], data["result_ttl_seconds"]) == ("acct:7", 3600.0)
    assert [s.waiting for s in queue.limits()] == [2]
    # One at a time: the key was never given a limit.
    assert len(queue.claim(10, worker="w")) == 1


def test_enqueue_with_a_bad_result_ttl_or_limit_key_writes_nothing(
    run: Cli, queue: pgqueue.Queue, raw: Raw
) -> None:
    assert_usage_error(run("enqueue", "k", "--result-ttl", "0"), "must be longer than 0")
    assert_usage_error(run("enqueue", "k", "--result-ttl", "soon"), "--result-ttl")
    assert_usage_error(run("enqueue", "k", "--limit-key", ""), "limit_key must not be empty")
    assert_usage_error(run("enqueue", "k", "--result-ttl", "400000d"), "result_ttl must be at most")
    assert snapshot(raw) == []
    assert queue.limits() == []


def test_jobs_show_prints_the_limit_key_result_ttl_and_a_cancel_request(
    run: Cli, queue: pgqueue.Queue
) -> None:
    job_id = queue.enqueue("k", limit_key="acct:7", result_ttl=timedelta(minutes=90))
    queue.claim(1, worker="w")
    queue.cancel(job_id)
    ran = run("jobs", "show", str(job_id))
    assert ran.code == 0, ran
    for line in [
        "limit key   acct:7",
        "result ttl  1h30m",
        "status      running (cancel requested)",
    ]:
        assert line in ran.lines, ran.out
    data = run("jobs", "show", str(job_id), "--json").json()
    assert (data["limit_key"], data["result_ttl_seconds"], data["cancel_requested"]) == (
        "acct:7",
        5400.0,
        True,
    )
    plain = run("jobs", "show", str(queue.enqueue("k")), "--json").json()
    assert (plain["limit_key"], plain["result_ttl_seconds"], plain["cancel_requested"]) == (
        None,
        None,
        False,
    )


def test_cancel_says_how_many_jobs_that_waited_went_and_jobs_lists_waiting_ones(
    run: Cli, queue: pgqueue.Queue
) -> None:
    parent = queue.enqueue("parent")
    ids = queue.chain(("child", None), ("grandchild", None))
    child = queue.enqueue("child", depends_on=[parent])
    queue.enqueue("grandchild", depends_on=[child])

    listed = run("jobs", "list", "--status", "waiting", "--json")
    assert listed.code == 0, listed
    assert sorted(j["id"] for j in listed.json()) == sorted([ids[1], child, child + 1])
    shown = run("jobs", "show", str(child))
    assert f"waits for   {parent}" in shown.lines

    ran = run("cancel", str(parent))
    assert ran.code == 0, ran
    assert ran.lines == [
        f"removed 1 job (waiting or dead): {parent}",
        "cancelled 2 jobs that waited for them (depends_on)",
    ]


def test_enqueue_with_depends_on_writes_a_waiting_job(
    run: Cli, queue: pgqueue.Queue, raw: Raw
) -> None:
    first, second = queue.enqueue("a"), queue.enqueue("b")
    ran = run("enqueue", "c", "--depends-on", str(first), "--depends-on", str(second))
    assert ran.code == 0, ran
    job = max(queue.jobs(), key=lambda j: j.id)
    assert ran.out == f"enqueued job {job.id} (c), waiting for job {first}, {second}\n"
    assert job.status is pgqueue.JobStatus.WAITING
    data = run("enqueue", "c", "--depends-on", str(first), "--json").json()
    assert data["depends_on"] == [first]
    # A job that never existed: nothing written.
    before = snapshot(raw)
    assert_usage_error(run("enqueue", "c", "--depends-on", "999999999"), "999999999")
    assert_usage_error(run("enqueue", "c", "--depends-on", "x"), "not a job id")
    assert snapshot(raw) == before
