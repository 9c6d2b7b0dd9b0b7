"""The ``pgqueue`` command and queues, priorities and unique jobs: ``queues
list|pause|resume``, ``enqueue --queue --priority --unique-key ...``, and the
queue and priority in ``stats`` and ``jobs``.

They run in-process through `pgqueue.cli.main`, as in tests/test_cli_ops.py
(whose fixtures and helpers they use), against the suite's real database.
"""

from __future__ import annotations

import pgqueue
from pgqueue import JobStatus

from .conftest import Raw
from .test_cli_ops import Cli, assert_one_line_failure, bury, queue, run, snapshot

__all__ = ["queue", "run"]  # fixtures, used by name

# -- queues list, pause, resume ----------------------------------------------------


def test_queues_list_shows_every_queue_paused_or_not_with_its_jobs(
    run: Cli, queue: pgqueue.Queue
) -> None:
    queue.enqueue_many([("k", 1), ("k", 2)])
    queue.enqueue_many([pgqueue.JobSpec("k", i, queue="mail") for i in range(3)])
    queue.claim(1, worker="w", queues=["mail"])
    bury(queue, "x")
    queue.pause_queue("reports")  # no jobs yet, paused ahead of them

    ran = run("queues", "list")
    assert ran.code == 0, ran
    assert ran.lines == [
        "QUEUE    PAUSED  PENDING  RUNNING  DEAD  WAITING",
        "default  no            2        0     1        0",
        "mail     no            2        1     0        0",
        "reports  yes           0        0     0        0",
    ]
    assert run("queues", "list", "--json").json() == [
        {
            "name": "default",
            "paused": False,
            "by_status": {"pending": 2, "running": 0, "dead": 1, "waiting": 0},
            "estimated": [],
        },
        {
            "name": "mail",
            "paused": False,
            "by_status": {"pending": 2, "running": 1, "dead": 0, "waiting": 0},
            "estimated": [],
        },
        {
            "name": "reports",
            "paused": True,
            "by_status": {"pending": 0, "running": 0, "dead": 0, "waiting": 0},
            "estimated": [],
        },
    ]


def test_queues_list_of_an_empty_table(run: Cli, queue: pgqueue.Queue) -> None:
    ran = run("queues", "list")
    assert (ran.code, ran.out) == (0, "no queues (no jobs, and no queue ever paused)\n")
    assert run("queues", "list", "--json").json() == []


def test_queues_pause_holds_the_queues_jobs_and_resume_lets_them_be_claimed(
    run: Cli, queue: pgqueue.Queue
) -> None:
    held = queue.enqueue("k", queue="mail")
    other = queue.enqueue("k")

    paused = run("queues", "pause", "mail")
    assert paused.code == 0, paused
    assert paused.out == (
        "queue mail paused (1 pending, 0 running, 0 dead, 0 waiting): "
        "no worker claims its jobs until it is resumed\n"
    )
    assert [j.id for j in queue.claim(10, worker="w")] == [other]
    # Pausing twice is no error; the queue stays paused.
    assert run("queues", "pause", "mail", "--json").json() == {
        "name": "mail",
        "paused": True,
        "by_status": {"pending": 1, "running": 0, "dead": 0, "waiting": 0},
        "estimated": [],
    }
    assert queue.claim(10, worker="w") == []

    resumed = run("queues", "resume", "mail")
    assert (resumed.code, resumed.out) == (
        0,
        "queue mail resumed (1 pending, 0 running, 0 dead, 0 waiting)\n",
    )
    assert [j.id for j in queue.claim(10, worker="w")] == [held]


def test_queues_pause_of_a_queue_without_jobs_says_it_has_none(
    run: Cli, queue: pgqueue.Queue
) -> None:
    queue.enqueue("k", queue="mail")
    # A typo pauses a queue of its own: the command shows it has no jobs.
    ran = run("queues", "pause", "mial")
    assert ran.code == 0, ran
    assert ran.out.startswith("queue mial paused (no jobs): ")
    assert [j.queue for j in queue.claim(10, worker="w")] == ["mail"]


# -- enqueue ----------------------------------------------------------------------------


def test_enqueue_puts_the_job_in_its_queue_at_its_priority(run: Cli, queue: pgqueue.Queue) -> None:
    ran = run("enqueue", "mail", '{"to": "a"}', "--queue", "mail", "--priority", "10")
    assert ran.code == 0, ran
    [job] = queue.jobs()
    assert ran.out == f"enqueued job {job.id} (mail) in queue mail at priority 10\n"
    assert (job.queue, job.priority, job.payload) == ("mail", 10, {"to": "a"})

    low = run("enqueue", "mail", "--queue", "mail", "--priority", "-100", "--delay", "1m", "--json")
    assert low.json()["queue"] == "mail" and low.json()["priority"] == -100
    new = queue.get(low.json()["id"])
    assert new is not None and new.priority == -100


def test_enqueue_of_a_taken_unique_key_prints_its_holder_and_writes_nothing(
    run: Cli, queue: pgqueue.Queue, raw: Raw
) -> None:
    first = run("enqueue", "sync_user", '{"id": 7}', "--unique-key", "user:7", "--json").json()
    assert (first["duplicate"], first["replaced"]) == (False, False)
    before = snapshot(raw)

    again = run("enqueue", "sync_user", '{"id": 8}', "--unique-key", "user:7")
    assert (again.code, again.err) == (0, "")
    assert again.out == f"job {first['id']} holds unique key 'user:7' already: nothing enqueued\n"
    as_json = run("enqueue", "sync_user", "--unique-key", "user:7", "--json").json()
    assert (as_json["id"], as_json["duplicate"], as_json["replaced"]) == (first["id"], True, False)
    assert snapshot(raw) == before


def test_enqueue_on_duplicate_raise_exits_1_naming_the_holder(
    run: Cli, queue: pgqueue.Queue, raw: Raw
) -> None:
    holder = queue.enqueue("sync_user", unique_key="user:7", unique="active")
    queue.claim(1, worker="w")  # running: still the holder of an "active" key
    before = snapshot(raw)
    ran = run("enqueue", "sync_user", "--unique-key", "user:7", "--unique", "active",
              "--on-duplicate", "raise", "--json")  # fmt: skip
    assert_one_line_failure(
        ran, f"a job with unique key 'user:7' exists already: job {holder}; nothing enqueued"
    )
    assert ran.out == ""
    assert snapshot(raw) == before
    # Started, it no longer holds a "queued" key.
    queued = run("enqueue", "sync_user", "--unique-key", "user:7", "--on-duplicate", "raise")
    assert queued.code == 0, queued


def test_enqueue_on_duplicate_replace_gives_the_waiting_holder_the_new_payload(
    run: Cli, queue: pgqueue.Queue
) -> None:
    holder = queue.enqueue("report", {"v": 1}, unique_key="daily")
    ran = run("enqueue", "report", '{"v": 2}', "--unique-key", "daily", "--on-duplicate",
              "replace", "--delay", "1h")  # fmt: skip
    assert ran.code == 0, ran
    assert ran.out == f"job {holder} holds unique key 'daily': its payload and run_at replaced\n"
    [job] = queue.jobs()
    assert (job.id, job.payload) == (holder, {"v": 2})
    assert queue.claim(1, worker="w") == []  # due in an hour now


def test_enqueue_unique_for_holds_the_key_after_its_job_is_gone(
    run: Cli, queue: pgqueue.Queue
) -> None:
    first = run("enqueue", "digest", "--unique-key", "d", "--unique-for", "1h", "--json").json()
    queue.complete(*queue.claim(1, worker="w"))
    assert queue.jobs() == []
    again = run("enqueue", "digest", "--unique-key", "d", "--unique-for", "1h")
    assert again.out == f"job {first['id']} holds unique key 'd' already: nothing enqueued\n"
    assert queue.jobs() == []


# -- stats, jobs list, jobs show, dead list -----------------------------------------


def test_stats_counts_jobs_by_queue_and_by_priority(run: Cli, queue: pgqueue.Queue) -> None:
    queue.enqueue_many([pgqueue.JobSpec("mail", i, queue="mail", priority=10) for i in range(2)])
    queue.enqueue("report", priority=-5)
    bury(queue, "report")

    ran = run("stats")
    assert ran.code == 0, ran
    for line in [
        "QUEUE    PENDING  RUNNING  DEAD  WAITING",
        "default        1        0     1        0",
        "mail           2        0     0        0",
        "PRIORITY  PENDING  RUNNING  DEAD  WAITING",
        "      10        2        0     0        0",
        "       0        0        0     1        0",
        "      -5        1        0     0        0",
    ]:
        assert line in ran.lines, ran.out
    data = run("stats", "--json").json()
    assert data["by_queue"] == {
        "default": {"pending": 1, "running": 0, "dead": 1, "waiting": 0},
        "mail": {"pending": 2, "running": 0, "dead": 0, "waiting": 0},
    }
    assert list(data["by_priority"].items()) == [
        ("10", {"pending": 2, "running": 0, "dead": 0, "waiting": 0}),
        ("0", {"pending": 0, "running": 0, "dead": 1, "waiting": 0}),
        ("-5", {"pending": 1, "running": 0, "dead": 0, "waiting": 0}),
    ]


def test_jobs_list_filters_by_queue_and_shows_queue_and_priority(
    run: Cli, queue: pgqueue.Queue
) -> None:
    plain = queue.enqueue("k")
    mail = queue.enqueue("k", queue="mail", priority=-3)
    sms = queue.enqueue("k", queue="sms", priority=100)

    everything = run("jobs", "list")
    assert everything.code == 0, everything
    rows = {int(line.split()[0]): line.split()[2:5] for line in everything.lines[1:]}
    assert rows == {
        plain: ["default", "0", "pending"],
        mail: ["mail", "-3", "pending"],
        sms: ["sms", "100", "pending"],
    }

    def listed(*args: str) -> list[int]:
        ran = run("jobs", "list", "--json", *args)
        assert ran.code == 0, ran
        return [job["id"] for job in ran.json()]

    assert listed("--queue", "mail") == [mail]
    assert listed("--queue", "mail", "--queue", "sms") == [mail, sms]
    assert listed("--queue", "sms", "--status", "dead") == []
    assert listed("--queue", "nothing") == []
    [shown] = run("jobs", "list", "--json", "--queue", "sms").json()
    assert (shown["queue"], shown["priority"], shown["unique_key"]) == ("sms", 100, None)


def test_dead_list_filters_by_queue(run: Cli, queue: pgqueue.Queue) -> None:
    default = bury(queue, "k")
    job_id = queue.enqueue("other", queue="bulk", max_attempts=1)
    [job] = queue.claim(1, worker="w", queues=["bulk"])
    assert queue.fail(job, "boom") is JobStatus.DEAD

    ran = run("dead", "list", "--queue", "bulk")
    assert ran.code == 0, ran
    assert [line.split()[:3] for line in ran.lines[1:]] == [[str(job_id), "other", "bulk"]]
    assert [j["id"] for j in run("dead", "list", "--json").json()] == [default, job_id]


def test_jobs_show_prints_the_queue_priority_and_unique_key(run: Cli, queue: pgqueue.Queue) -> None:
    job_id = queue.enqueue("k", queue="mail", priority=42, unique_key="order:9")
    ran = run("jobs", "show", str(job_id))
    assert ran.code == 0, ran
    for line in ["queue       mail", "priority    42", "unique key  order:9"]:
        assert line in ran.lines
    data = run("jobs", "show", str(job_id), "--json").json()
    assert (data["queue"], data["priority"], data["unique_key"]) == ("mail", 42, "order:9")
