"""The operator's ``pgqueue`` subcommands: migrate, enqueue, stats, jobs, dead,
history, reap.

Most run in-process through `pgqueue.cli.main` (the same code the console
script calls), reading what they print with capsys; a few run the installed
``pgqueue`` script in a process of its own. The database is the real one of
the suite; each test has a table of its own, named by ``PGQUEUE_TABLE``.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import pgqueue
from pgqueue import JobStatus, cli
from pgqueue.core import migrations
from pgqueue.core.ops import QueueCore
from pgqueue.sync.driver import run_on

from .conftest import Raw

UNREACHABLE_DSN = "postgresql://nobody@127.0.0.1:1/nothing?connect_timeout=5"
PATIENCE = 60.0  # seconds: a liveness deadline for a subprocess, never a performance claim


@dataclass
class Ran:
    """What one run of the command did."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


class Cli:
    """``pgqueue ARGS`` in-process, against the test's database and table (from the env)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def __call__(self, *args: str) -> Ran:
        self.capsys.readouterr()
        try:
            code = cli.main(list(args))
        except SystemExit as exc:  # argparse's own exits: --help, usage errors
            code = int(exc.code or 0)
        out, err = self.capsys.readouterr()
        return Ran(code, out, err)


@pytest.fixture
def run(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, dsn: str, table: str
) -> Cli:
    monkeypatch.setenv("PGQUEUE_DSN", dsn)
    monkeypatch.setenv("PGQUEUE_TABLE", table)
    return Cli(capsys)


@pytest.fixture
def queue(dsn: str, table: str) -> Any:
    with pgqueue.Queue(dsn, table=table) as q:
        q.install()
        yield q


def bury(queue: pgqueue.Queue, kind: str, error: str = "boom") -> int:
    """A dead job of ``kind``: its only attempt failed with ``error``."""
    job_id = queue.enqueue(kind, {"kind": kind}, max_attempts=1)
    [job] = queue.claim(1, kinds=[kind], worker="w")
    assert job.id == job_id, "bury() needs the only ready job of its kind"
    assert queue.fail(job, error) is JobStatus.DEAD
    return job_id


def snapshot(raw: Raw) -> list[tuple[Any, ...]]:
    return raw.rows("SELECT * FROM {table} ORDER BY id")


def assert_usage_error(ran: Ran, message: str) -> None:
    assert ran.code == 2, ran
    assert "usage: pgqueue" in ran.err
    assert message in ran.err, ran.err
    assert "Traceback" not in ran.err
    assert ran.out == ""


def assert_one_line_failure(ran: Ran, message: str) -> None:
    assert ran.code == 1, ran
    assert ran.err.count("\n") == 1 and ran.err.endswith("\n"), ran.err
    assert message in ran.err, ran.err
    assert "Traceback" not in ran.err and "usage:" not in ran.err


# -- migrate -------------------------------------------------------------------


def test_migrate_creates_the_schema_then_reports_it_up_to_date(
    run: Cli, raw: Raw, table: str
) -> None:
    assert raw.one("SELECT to_regclass(%s) IS NULL", table)
    first = run("migrate")
    assert first.code == 0, first
    with pgqueue.Queue(raw.conn.info.dsn, table=table) as q:
        version = q.schema_version()
    assert version is not None
    applied = ", ".join(str(v) for v in range(1, version + 1))
    assert first.out == f"{table}: schema at version {version} (applied {applied})\n"
    assert raw.count() == 0  # the table exists now

    again = run("migrate")
    assert (again.code, again.out) == (0, f"{table}: schema at version {version}, up to date\n")
    as_json = run("migrate", "--json")
    assert as_json.json() == {
        "table": table,
        "version": version,
        "applied": [],
        "contracted": [],
        "contract_pending": [],
    }


def test_migrate_lists_the_pending_contract_steps_and_contract_runs_them(
    run: Cli, raw: Raw, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A table at version 6, as the release before migration 7 left it.
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:6])
        run_on(raw.conn, QueueCore(table).install())
    expanded = run("migrate")
    assert expanded.code == 0, expanded
    lines = expanded.out.splitlines()
    assert lines[0].startswith(f"{table}: schema at version {migrations.LATEST_VERSION} (applied 7")
    assert "pgqueue migrate --contract" in lines[1]
    assert lines[2].startswith(f"  7: drop the ready index of migration 1 ({table}_ready)")
    assert lines[3].startswith(f"  8: drop the claim index of migration 7 ({table}_claim)")
    assert raw.one("SELECT to_regclass(%s)", f"{table}_ready") is not None
    pending = run("migrate", "--json").json()["contract_pending"]
    assert [step["version"] for step in pending] == [7, 8]

    contracted = run("migrate", "--contract")
    assert contracted.code == 0, contracted
    assert contracted.out.splitlines()[1:] == ["contracted 7, 8"]
    assert raw.one("SELECT to_regclass(%s)", f"{table}_ready") is None
    again = run("migrate", "--contract", "--json").json()
    assert (again["contracted"], again["contract_pending"]) == ([], [])
    assert run("migrate", "--contract").out.splitlines()[1:] == ["nothing to contract"]


def test_migrate_refuses_a_schema_newer_than_the_library(
    run: Cli, queue: pgqueue.Queue, raw: Raw, table: str
) -> None:
    key = QueueCore(table).schema.key
    raw.rows(
        "INSERT INTO pgqueue_schema (queue_table, version, description) VALUES (%s, %s, %s)",
        key,
        9999,
        "from a later pgqueue",
    )
    ran = run("migrate")
    assert_one_line_failure(ran, "9999")
    assert "upgrade pgqueue" in ran.err
    assert ran.out == ""


# -- grant ---------------------------------------------------------------------


def test_grant_prints_what_it_granted_and_refuses_bad_input(run: Cli, raw: Raw, table: str) -> None:
    assert_usage_error(run("grant", ""), "invalid role name")
    assert_one_line_failure(run("grant", "postgres"), "not installed")
    assert run("migrate").code == 0
    ran = run("grant", "postgres", "--read-only", "--json")
    assert ran.code == 0, ran
    document = ran.json()
    assert (document["role"], document["read_only"]) == ("postgres", True)
    assert document["statements"][0] == 'GRANT USAGE ON SCHEMA "public" TO "postgres"'
    assert all("INSERT" not in s for s in document["statements"])
    missing = run("grant", "no_such_role_here")
    assert_one_line_failure(missing, "no_such_role_here")


# -- enqueue -------------------------------------------------------------------


def test_enqueue_writes_the_job_and_prints_its_id(run: Cli, queue: pgqueue.Queue) -> None:
    ran = run("enqueue", "send_receipt", '{"order_id": 42}')
    assert ran.code == 0, ran
    [job] = queue.jobs()
    assert ran.out == f"enqueued job {job.id} (send_receipt)\n"
    assert (job.kind, job.payload, job.max_attempts) == ("send_receipt", {"order_id": 42}, 3)
    assert job.status is JobStatus.PENDING

    as_json = run("enqueue", "ping", "--json")
    assert as_json.code == 0
    new = as_json.json()
    assert new == {
        "id": new["id"],
        "kind": "ping",
        "table": queue.table,
        "queue": "default",
        "priority": 0,
        "duplicate": False,
        "replaced": False,
        "limit_key": None,
        "depends_on": [],
        "result_ttl_seconds": None,
    }
    ping = queue.get(new["id"])
    assert ping is not None and (ping.kind, ping.payload) == ("ping", None)


def test_enqueue_options_delay_run_at_and_max_attempts(
    run: Cli, queue: pgqueue.Queue, raw: Raw
) -> None:
    delayed = run("enqueue", "later", "[1, 2]", "--delay", "1h30m", "--max-attempts", "7")
    assert delayed.code == 0 and delayed.out.endswith(", due in 1h30m\n"), delayed
    when = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    at = run("enqueue", "dated", "--run-at", "2031-05-06T09:08:09+02:00", "--json")
    assert at.code == 0, at

    rows = raw.rows(
        "SELECT kind, payload, max_attempts, run_at - created_at > interval '89 minutes',"
        " run_at FROM {table} ORDER BY id"
    )
    assert rows[0][:4] == ("later", [1, 2], 7, True)
    assert rows[1][0] == "dated" and rows[1][4] == when
    assert queue.claim(10) == []  # neither is due yet


def test_enqueue_reads_the_payload_from_stdin_given_a_dash(
    run: Cli, queue: pgqueue.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"lines": ["a\\nb"], "n": 1.5}\n'))
    ran = run("enqueue", "from_stdin", "-")
    assert ran.code == 0, ran
    [job] = queue.jobs()
    assert job.payload == {"lines": ["a\nb"], "n": 1.5}


# -- stats ---------------------------------------------------------------------


def test_stats_prints_counts_oldest_wait_and_jobs_past_their_lease(
    run: Cli, queue: pgqueue.Queue, raw: Raw, table: str
) -> None:
    bury(queue, "sms")
    queue.enqueue_many([("mail", 1), ("mail", 2), ("sms", 3)])
    [stuck] = queue.claim(1, kinds=["mail"], worker="gone")
    raw.rows("UPDATE {table} SET locked_at = now() - interval '10 minutes' WHERE id = %s", stuck.id)
    raw.rows("UPDATE {table} SET run_at = now() - interval '2 hours' WHERE status = 'pending'")

    ran = run("stats")
    assert ran.code == 0, ran
    assert ran.out.startswith(f"queue {table}\n")
    for line in ["pending     2", "running     1", "dead        1", "total       4"]:
        assert line in ran.lines
    assert "KIND  PENDING  RUNNING  DEAD  WAITING" in ran.lines
    assert "mail        1        1     0        0" in ran.lines
    assert "sms         1        0     1        0" in ran.lines
    assert "running past their lease (5m): 1" in ran.lines
    [waiting] = [line for line in ran.lines if line.startswith("oldest ready job waiting: ")]
    assert waiting.removeprefix("oldest ready job waiting: ").startswith("2h")

    data = run("stats", "--json", "--visibility-timeout", "15m").json()
    age = data.pop("oldest_pending_age_seconds")
    assert age >= 7200
    assert data == {
        "table": table,
        "total": 4,
        "by_status": {"pending": 2, "running": 1, "dead": 1, "waiting": 0},
        "by_kind": {
            "mail": {"pending": 1, "running": 1, "dead": 0, "waiting": 0},
            "sms": {"pending": 1, "running": 0, "dead": 1, "waiting": 0},
        },
        "by_queue": {"default": {"pending": 2, "running": 1, "dead": 1, "waiting": 0}},
        "by_priority": {"0": {"pending": 2, "running": 1, "dead": 1, "waiting": 0}},
        "expired": 0,  # locked 10 minutes ago: within a 15 minute lease
        "visibility_timeout_seconds": 900.0,
        "estimated": [],
    }


def test_stats_of_an_empty_queue(run: Cli, queue: pgqueue.Queue) -> None:
    ran = run("stats")
    assert ran.code == 0
    assert "total       0" in ran.lines
    assert "KIND" not in ran.out
    assert "oldest ready job waiting: -" in ran.lines
    data = run("stats", "--json").json()
    assert (data["total"], data["by_kind"], data["oldest_pending_age_seconds"]) == (0, {}, None)


# -- jobs ------------------------------------------------------------------------


def test_jobs_list_filters_by_status_and_kind_and_pages(run: Cli, queue: pgqueue.Queue) -> None:
    a1, b1, a2, c1 = queue.enqueue_many([("a", 1), ("b", 2), ("a", 3), ("c", 4)])
    queue.claim(1, kinds=["b"], worker="worker-7")
    dead = bury(queue, "d")

    everything = run("jobs", "list")
    assert everything.code == 0
    assert everything.lines[0].split() == [
        "ID", "KIND", "QUEUE", "PRIORITY", "STATUS", "ATTEMPTS", "RUN", "AT", "LOCKED", "BY",
        "LAST", "ERROR"
    ]  # fmt: skip
    assert [int(line.split()[0]) for line in everything.lines[1:]] == [a1, b1, a2, c1, dead]
    running = next(line for line in everything.lines if line.split()[0] == str(b1))
    assert "running" in running and "worker-7" in running and "1/3" in running

    def listed(*args: str) -> list[int]:
        ran = run("jobs", "list", "--json", *args)
        assert ran.code == 0, ran
        return [job["id"] for job in ran.json()]

    assert listed("--kind", "a") == [a1, a2]
    assert listed("--kind", "a", "--kind", "d") == [a1, a2, dead]
    assert listed("--status", "pending", "--kind", "c", "--kind", "d") == [c1]
    assert listed("--status", "dead") == [dead]
    assert listed("--limit", "2") == [a1, b1]
    assert listed("--limit", "2", "--after", str(b1)) == [a2, c1]
    assert listed("--kind", "nothing") == []
    assert run("jobs", "list", "--kind", "nothing").out == "no jobs\n"


def test_jobs_show_prints_one_job_with_payload_and_last_error(
    run: Cli, queue: pgqueue.Queue
) -> None:
    job_id = bury(queue, "report", error="Traceback (most recent call last):\nValueError: no")
    ran = run("jobs", "show", str(job_id))
    assert ran.code == 0, ran
    assert f"id          {job_id}" in ran.lines
    assert "status      dead" in ran.lines
    assert "attempts    1 of 1" in ran.lines
    assert ran.out.endswith(
        'payload:\n  {\n    "kind": "report"\n  }\n'
        "last error:\n  Traceback (most recent call last):\n  ValueError: no\n"
    )

    data = run("jobs", "show", str(job_id), "--json").json()
    assert data["id"] == job_id and data["status"] == "dead"
    assert data["payload"] == {"kind": "report"}
    assert data["last_error"].endswith("ValueError: no")
    assert datetime.fromisoformat(data["run_at"]) == queue.get(job_id).run_at  # type: ignore[union-attr]


def test_jobs_show_of_a_missing_job_exits_1(run: Cli, queue: pgqueue.Queue) -> None:
    ran = run("jobs", "show", "424242")
    assert_one_line_failure(ran, "no job 424242")
    assert ran.out == ""


# -- dead --------------------------------------------------------------------------


def test_dead_list_shows_only_dead_jobs(run: Cli, queue: pgqueue.Queue) -> None:
    queue.enqueue("alive")
    first, second = bury(queue, "x", "first failure"), bury(queue, "y", "second failure")
    ran = run("dead", "list")
    assert ran.code == 0
    assert ran.lines[0].split()[:4] == ["ID", "KIND", "QUEUE", "ATTEMPTS"]
    assert [line.split()[0] for line in ran.lines[1:]] == [str(first), str(second)]
    assert "first failure" in ran.lines[1] and "second failure" in ran.lines[2]
    assert [j["id"] for j in run("dead", "list", "--json", "--kind", "y").json()] == [second]
    assert run("dead", "list", "--kind", "alive").out == "no dead jobs\n"


def test_dead_retry_by_id_revives_those_jobs(run: Cli, queue: pgqueue.Queue) -> None:
    a, b, c = bury(queue, "k"), bury(queue, "k"), bury(queue, "k")
    ran = run("dead", "retry", str(a), str(c))
    assert (ran.code, ran.out, ran.err) == (0, "retried 2 dead jobs\n", "")
    states = {j.id: (j.status, j.attempts) for j in queue.jobs()}
    assert states == {a: (JobStatus.PENDING, 0), b: (JobStatus.DEAD, 1), c: (JobStatus.PENDING, 0)}


def test_dead_retry_of_a_job_that_is_not_dead_exits_1_and_still_retries_the_dead_ones(
    run: Cli, queue: pgqueue.Queue
) -> None:
    dead = bury(queue, "k")
    pending = queue.enqueue("k")
    ran = run("dead", "retry", str(dead), str(pending), "999999", "--json")
    assert ran.code == 1
    assert ran.json() == {
        "retried": 1,
        "not_dead": [{"id": pending, "status": "pending"}, {"id": 999999, "status": None}],
        "key_held": [],
    }
    assert f"job {pending} not retried: it is pending, not dead" in ran.err
    assert "job 999999 not retried: no such job" in ran.err
    assert "Traceback" not in ran.err
    revived = queue.get(dead)
    assert revived is not None and revived.status is JobStatus.PENDING


def test_dead_retry_of_a_unique_job_whose_key_is_held_says_so_and_exits_1(
    run: Cli, queue: pgqueue.Queue
) -> None:
    dead = queue.enqueue("k", unique_key="acct:1", unique="active", max_attempts=1)
    [job] = queue.claim(1, worker="w")
    assert queue.fail(job, "boom") is JobStatus.DEAD
    holder = queue.enqueue("k", unique_key="acct:1", unique="active")
    ran = run("dead", "retry", str(dead), "--json")
    assert ran.code == 1
    assert ran.json() == {
        "retried": 0,
        "not_dead": [],
        "key_held": [{"id": dead, "unique_key": "acct:1"}],
    }
    assert f"job {dead} not retried: another job holds its unique key 'acct:1'" in ran.err
    assert "no longer dead" not in ran.err
    assert {j.id: j.status for j in queue.jobs()} == {
        dead: JobStatus.DEAD,
        holder: JobStatus.PENDING,
    }


def test_dead_retry_all_revives_every_dead_job_of_the_kinds_given(
    run: Cli, queue: pgqueue.Queue
) -> None:
    a, b, c = bury(queue, "a"), bury(queue, "b"), bury(queue, "c")
    ran = run("dead", "retry", "--all", "--kind", "a", "--kind", "c")
    assert (ran.code, ran.out) == (0, "retried 2 dead jobs\n")
    assert [j.id for j in queue.jobs(status="dead")] == [b]
    assert run("dead", "retry", "--all", "--json").json() == {"retried": 1}
    assert queue.jobs(status="dead") == []
    assert {j.id for j in queue.jobs(status="pending")} == {a, b, c}
    # Nothing left to retry is not a failure.
    assert (run("dead", "retry", "--all").code, queue.stats().total) == (0, 3)


def test_dead_purge_deletes_dead_jobs_older_than_the_duration(
    run: Cli, queue: pgqueue.Queue, raw: Raw
) -> None:
    old_x, old_y, recent = bury(queue, "x"), bury(queue, "y"), bury(queue, "x")
    alive = queue.enqueue("x")
    raw.rows(
        "UPDATE {table} SET run_at = now() - interval '8 days' WHERE id = ANY(%s)",
        [old_x, old_y, alive],
    )
    only_x = run("dead", "purge", "--older-than", "7d", "--kind", "x")
    assert (only_x.code, only_x.out) == (0, "purged 1 dead job older than 7d\n")
    assert run("dead", "purge", "--older-than", "7d", "--json").json() == {"purged": 1}
    assert sorted(r[0] for r in raw.rows("SELECT id FROM {table}")) == [recent, alive]


def test_dead_purge_with_history_copies_the_purged_jobs_into_the_history_table(
    run: Cli, queue: pgqueue.Queue, raw: Raw, table: str
) -> None:
    kept, dropped = bury(queue, "x", "kept failure"), bury(queue, "y")
    history = f'"{table}_history"'
    with_history = run("dead", "purge", "--older-than", "0", "--kind", "x", "--history")
    assert (with_history.code, with_history.out) == (0, "purged 1 dead job older than 0s\n")
    without = run("dead", "purge", "--older-than", "0")
    assert (without.code, without.out) == (0, "purged 1 dead job older than 0s\n")
    assert raw.count() == 0
    copied = raw.rows(f"SELECT id, kind, last_error, outcome FROM {history}")
    assert copied == [(kept, "x", "kept failure", "dead")]
    assert dropped not in [r[0] for r in copied]


# -- history and reap ------------------------------------------------------------


def test_history_prune_deletes_history_rows_older_than_the_duration(
    run: Cli, dsn: str, table: str, raw: Raw
) -> None:
    with pgqueue.Queue(dsn, table=table, history=True) as q:
        q.install()
        q.enqueue_many([("a", 1), ("a", 2)])
        q.complete(*q.claim(2))
    history = f"{table}_history"
    assert raw.one(f'SELECT count(*) FROM "{history}"') == 2
    assert (run("history", "prune", "--older-than", "1d").out) == (
        "pruned 0 history rows older than 1d\n"
    )
    raw.rows(f"UPDATE \"{history}\" SET finished_at = now() - interval '2 days'")
    ran = run("history", "prune", "--older-than", "1d", "--json")
    assert (ran.code, ran.json()) == (0, {"pruned": 2})
    assert raw.one(f'SELECT count(*) FROM "{history}"') == 0


def test_reap_returns_jobs_past_their_lease_to_pending(
    run: Cli, queue: pgqueue.Queue, raw: Raw
) -> None:
    stale, fresh = queue.enqueue_many([("a", 1), ("a", 2)])
    queue.claim(2, worker="gone")
    raw.rows("UPDATE {table} SET locked_at = now() - interval '20 minutes' WHERE id = %s", stale)

    patient = run("reap", "--visibility-timeout", "1h", "--json")
    assert patient.json() == {"reaped": [], "visibility_timeout_seconds": 3600.0}
    ran = run("reap")
    assert (ran.code, ran.out) == (0, f"returned 1 job past a 5m lease to pending: {stale}\n")
    statuses = {j.id: j.status for j in queue.jobs()}
    assert statuses == {stale: JobStatus.PENDING, fresh: JobStatus.RUNNING}
    assert run("reap").out == "no job returned to pending (none running past a 5m lease)\n"


# -- options, bad arguments and failures -----------------------------------------


def test_dsn_and_table_options_win_over_the_environment(
    run: Cli, queue: pgqueue.Queue, dsn: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGQUEUE_DSN", UNREACHABLE_DSN)
    monkeypatch.setenv("PGQUEUE_TABLE", "some_other_table")
    ran = run("enqueue", "k", "--dsn", dsn, "--table", table)
    assert ran.code == 0, ran
    assert [j.kind for j in queue.jobs()] == ["k"]


BAD_ARGUMENTS: list[tuple[list[str], str]] = [
    (["jobs"], "the following arguments are required: ACTION"),
    (["dead"], "the following arguments are required: ACTION"),
    (["history"], "the following arguments are required: ACTION"),
    (["jobs", "frob"], "invalid choice: 'frob'"),
    (["stats", "--visibility-timeout", "5 minutes"], "not a duration: '5 minutes'"),
    (["stats", "--visibility-timeout", "0"], "must be longer than 0"),
    (["reap", "--visibility-timeout=-5m"], "not a duration: '-5m'"),
    (["reap", "--visibility-timeout", "-5m"], "expected one argument"),
    (["reap", "--visibility-timeout", "1.5h"], "not a duration"),
    (["dead", "purge"], "the following arguments are required: --older-than"),
    (["dead", "purge", "--older-than", "7 days"], "not a duration"),
    (["dead", "purge", "--older-than", "99999999999d"], "duration too long"),
    (["history", "prune", "--older-than", "0"], "must be longer than 0"),
    (["jobs", "list", "--limit", "0"], "must be at least 1"),
    (["jobs", "list", "--status", "done"], "invalid choice: 'done'"),
    (["jobs", "list", "--kind", ""], "job kind must not be empty"),
    (["jobs", "show"], "the following arguments are required: ID"),
    (["jobs", "show", "abc"], "not a job id: 'abc'"),
    (["jobs", "show", "0"], "not a job id: '0'"),
    (["dead", "retry"], "name the dead jobs to retry by ID, or give --all"),
    (["dead", "retry", "1", "--all"], "give job IDs or --all, not both"),
    (["dead", "retry", "1", "--kind", "a"], "--kind goes with --all"),
    (["enqueue"], "the following arguments are required: KIND"),
    (["enqueue", "k", "{oops"], "PAYLOAD_JSON is not valid JSON"),
    (["enqueue", "k", "NaN"], "PAYLOAD_JSON is not valid JSON: NaN is not a JSON number"),
    (["enqueue", "k", "[1e999]"], "PAYLOAD_JSON is not valid JSON: 1e999 is out of range"),
    (["enqueue", "k", "[" * 5000 + "]" * 5000], "PAYLOAD_JSON nests deeper than 500 levels"),
    (["enqueue", "k", "--queue", "a\nb"], "queue name must not contain control characters"),
    (["queues", "pause", "a\rforged"], "queue name must not contain control characters"),
    (["stats", "--table", "pg_temp.jobs"], "in a temporary or system schema"),
    (["dashboard", "--token", "s3cret"], "the token must be at least 16 characters long"),
    (["dashboard", "--basic-auth", "ops:s3cret"], "password must be at least 16 characters"),
    (["enqueue", ""], "job kind must not be empty"),
    (["enqueue", "k", "--max-attempts", "0"], "must be at least 1"),
    (["enqueue", "k", "--delay", "soon"], "not a duration: 'soon'"),
    (["enqueue", "k", "--run-at", "tomorrow"], "not an ISO 8601 time"),
    (["enqueue", "k", "--run-at", "2031-01-01T00:00:00"], "with its UTC offset"),
    (
        ["enqueue", "k", "--delay", "1m", "--run-at", "2031-01-01T00:00:00Z"],
        "not allowed with argument",
    ),
    (["queues"], "the following arguments are required: ACTION"),
    (["queues", "pause"], "the following arguments are required: NAME"),
    (["queues", "resume", ""], "queue name must not be empty"),
    (["jobs", "list", "--queue", ""], "queue name must not be empty"),
    (["enqueue", "k", "--queue", ""], "queue name must not be empty"),
    (["enqueue", "k", "--priority", "101"], "must be from -100 to 100"),
    (["enqueue", "k", "--priority", "high"], "not an integer: 'high'"),
    (["enqueue", "k", "--unique", "forever"], "invalid choice: 'forever'"),
    (["enqueue", "k", "--on-duplicate", "ignore"], "invalid choice: 'ignore'"),
    (["enqueue", "k", "--unique-key", ""], "unique_key must not be empty"),
    (["enqueue", "k", "--unique-for", "1h"], "unique_for needs a unique_key"),
    (["enqueue", "k", "--unique-key", "a", "--unique-for", "0"], "must be longer than 0"),
    (["enqueue", "k", "--on-duplicate", "raise"], "--on-duplicate go with --unique-key"),
    (["enqueue", "k", "--unique", "active"], "--unique and --on-duplicate go with --unique-key"),
    (
        ["enqueue", "k", "--unique-key", "a", "--unique", "active", "--unique-for", "1h"],
        "not allowed with argument --unique",
    ),
    (["stats", "--table", "jobs; DROP TABLE x"], "unsafe table name"),
    (["stats", "--dsn", "not a dsn"], "the DSN is not a connection string"),
    (["stats", "--frobnicate"], "unrecognized arguments: --frobnicate"),
]


@pytest.mark.parametrize(
    ("args", "message"), BAD_ARGUMENTS, ids=[" ".join(a) or "nothing" for a, _ in BAD_ARGUMENTS]
)
def test_bad_arguments_exit_2_with_a_usage_message_and_write_nothing(
    run: Cli, queue: pgqueue.Queue, raw: Raw, args: list[str], message: str
) -> None:
    bury(queue, "k")
    queue.enqueue("k")
    raw.rows("UPDATE {table} SET run_at = now() - interval '30 days'")
    before = snapshot(raw)
    assert_usage_error(run(*args), message)
    assert snapshot(raw) == before


@pytest.mark.parametrize(
    "args", [["migrate"], ["stats"], ["jobs", "list"], ["enqueue", "k"], ["dead", "retry", "1"]]
)
def test_no_database_given_is_a_usage_error(
    run: Cli, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.delenv("PGQUEUE_DSN")
    assert_usage_error(run(*args), "no database given: pass --dsn or set PGQUEUE_DSN")


@pytest.mark.parametrize(
    "args",
    [
        ["migrate"],
        ["enqueue", "k", "{}"],
        ["stats"],
        ["jobs", "list"],
        ["jobs", "show", "1"],
        ["dead", "list"],
        ["dead", "retry", "--all"],
        ["dead", "purge", "--older-than", "1d"],
        ["history", "prune", "--older-than", "1d"],
        ["reap"],
        ["queues", "list"],
        ["queues", "pause", "mail"],
    ],
    ids=lambda a: " ".join(a),
)
def test_unreachable_database_exits_1_with_one_clear_line(
    run: Cli, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.setenv("PGQUEUE_DSN", UNREACHABLE_DSN)
    ran = run(*args)
    assert_one_line_failure(ran, "cannot connect to the database")
    assert "Connection refused" in ran.err
    assert ran.out == ""


def test_a_table_that_was_never_migrated_exits_1_with_a_hint(
    run: Cli, raw: Raw, table: str
) -> None:
    ran = run("stats")
    assert_one_line_failure(ran, f'relation "{table}" does not exist')
    assert "pgqueue migrate" in ran.err
    assert raw.one("SELECT to_regclass(%s) IS NULL", table)  # nothing was created


def test_help_lists_every_subcommand_and_the_exit_codes(run: Cli) -> None:
    ran = run("--help")
    assert ran.code == 0
    commands = ["migrate", "enqueue", "stats", "jobs", "dead", "queues", "history", "reap"]
    for command in [*commands, "worker"]:
        assert f"    {command}" in ran.out
    assert "exit status:" in ran.out
    for code in ["0 ", "1 ", "2 "]:
        assert f"\n  {code}" in ran.out
    for sub in [["jobs", "list"], ["dead", "retry"], ["stats"], ["enqueue"]]:
        helped = run(*sub, "--help")
        assert helped.code == 0
        assert all(option in helped.out for option in ["--dsn", "--table", "--json"])


# -- the installed console script --------------------------------------------------


def console_script() -> str:
    found = shutil.which("pgqueue", path=str(Path(sys.executable).parent))
    assert found is not None, "the pgqueue console script is not installed beside python"
    return found


def script(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [console_script(), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=False,
    )


def test_console_script_runs_the_operator_commands(dsn: str, table: str) -> None:
    env = {"PATH": "/usr/bin:/bin", "PGQUEUE_DSN": dsn, "PGQUEUE_TABLE": table}
    migrated = script(env, "migrate", "--json")
    assert migrated.returncode == 0, migrated.stderr
    assert json.loads(migrated.stdout)["table"] == table

    enqueued = script(env, "enqueue", "send_receipt", '{"order_id": 42}', "--json")
    assert enqueued.returncode == 0, enqueued.stderr
    job_id = json.loads(enqueued.stdout)["id"]

    stats = script(env, "stats", "--json")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["by_kind"] == {
        "send_receipt": {"pending": 1, "running": 0, "dead": 0, "waiting": 0}
    }
    shown = script(env, "jobs", "show", str(job_id))
    assert shown.returncode == 0 and '"order_id": 42' in shown.stdout

    bad = script(env, "dead", "purge", "--older-than", "a week")
    assert (bad.returncode, bad.stdout) == (2, "")
    assert "usage: pgqueue dead purge" in bad.stderr and "Traceback" not in bad.stderr

    down = script({**env, "PGQUEUE_DSN": UNREACHABLE_DSN}, "stats")
    assert (down.returncode, down.stdout) == (1, "")
    assert down.stderr.count("\n") == 1 and "cannot connect to the database" in down.stderr


def test_a_reader_that_stops_reading_ends_the_command_quietly(
    dsn: str, table: str, queue: pgqueue.Queue
) -> None:
    # `pgqueue jobs list --json | head -1`: more output than a pipe holds,
    # and a reader that goes away after its first line.
    queue.enqueue_many([("k", {"text": "x" * 500, "n": i}) for i in range(500)])
    env = {"PATH": "/usr/bin:/bin", "PGQUEUE_DSN": dsn, "PGQUEUE_TABLE": table}
    proc = subprocess.Popen(
        [console_script(), "jobs", "list", "--json", "--limit", "500"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == "[\n"
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=PATIENCE) == 0, err
    assert err == ""
