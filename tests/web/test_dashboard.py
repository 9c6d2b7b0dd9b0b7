"""The dashboard against the suite's real PostgreSQL, through its WSGI app:
each page renders, actions change the database, and nobody acts who may not."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import pgqueue
from pgqueue.core import dashboard as dashboard_core
from pgqueue.core.dashboard import DashboardCore, JobFilter
from pgqueue.core.events import ActionName, OperatorAction
from pgqueue.core.plans import Operation, Plan, Query
from pgqueue.core.schedules import validate_schedule
from pgqueue.web import Dashboard

from ..conftest import Raw
from .conftest import Operator, dead_job

PAGES = ["/", "/jobs", "/dead", "/running", "/queues", "/schedules", "/limits"]


def test_every_page_renders_with_the_queue_s_jobs(queue: pgqueue.Queue, operator: Operator) -> None:
    pending = queue.enqueue("send_mail", {"to": "ann"}, queue="mail")
    dead = dead_job(queue, "charge")
    queue.enqueue("slow", queue="mail")
    [running] = queue.claim(1, worker="host-1:42", kinds=["slow"])
    queue.set_limit("api", 3)
    queue.register_schedules([validate_schedule("report", cron="0 6 * * *")])
    pages = {path: operator.text(path) for path in PAGES}
    assert "send_mail" in pages["/"] and "mail" in pages["/"]
    assert f'href="/jobs/{pending}"' in pages["/jobs"]
    assert f'href="/jobs/{dead}"' in pages["/dead"] and "charge failed" in pages["/dead"]
    assert f'href="/jobs/{pending}"' not in pages["/dead"]
    assert "host-1:42" in pages["/running"] and f'href="/jobs/{running.id}"' in pages["/running"]
    assert "mail" in pages["/queues"]
    assert "report" in pages["/schedules"] and "0 6 * * *" in pages["/schedules"]
    assert "api" in pages["/limits"]
    detail = operator.text(f"/jobs/{dead}")
    assert "charge failed" in detail and "Retry" in detail


def test_a_job_page_shows_what_it_waits_for_and_what_waits_for_it(
    queue: pgqueue.Queue, operator: Operator
) -> None:
    group = queue.group(("part", 1), ("part", 2), then=("total", None))
    assert group.then is not None
    then = operator.text(f"/jobs/{group.then}")
    assert "Waits for" in then
    assert all(f'href="/jobs/{i}"' in then for i in group.ids)
    part = operator.text(f"/jobs/{group.ids[0]}")
    assert "Waited for by" in part and f'href="/jobs/{group.then}"' in part
    assert "waiting" in operator.text("/jobs?status=waiting")


def test_overview_counts_jobs_by_queue_kind_and_status(
    queue: pgqueue.Queue, dashboard: Dashboard
) -> None:
    for _ in range(3):
        queue.enqueue("a", queue="q1")
    dead_job(queue, "b", queue="q2")
    ov = dashboard._run(dashboard.core.overview())
    assert ov.exact
    assert {s.value: str(c) for s, c in ov.totals.items()} == {
        "pending": "3", "running": "0", "dead": "1", "waiting": "0",
    }  # fmt: skip
    assert [
        (g.queue, g.kind, {s.value: c.value for s, c in g.counts.items()}) for g in ov.groups
    ] == [
        ("q1", "a", {"pending": 3}),
        ("q2", "b", {"dead": 1}),
    ]


def test_large_table_counts_are_capped_not_scanned(
    queue: pgqueue.Queue, dashboard: Dashboard, operator: Operator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dashboard_core, "EXACT_ROWS", 5)
    monkeypatch.setattr(dashboard_core, "CAP", 4)
    queue.enqueue_many([("a", {"n": i}) for i in range(8)])
    dead_job(queue)
    ov = dashboard._run(dashboard.core.overview())
    assert not ov.exact
    assert str(ov.totals[pgqueue.JobStatus.DEAD]) == "1"
    [default] = [q for q in ov.queues if q.name == "default"]
    assert str(default.pending) == "4+"
    assert "4+" in operator.text("/")


def test_job_browser_filters_and_pages_by_keyset(queue: pgqueue.Queue, operator: Operator) -> None:
    ids = queue.enqueue_many([("a", {"n": i, "tag": "x" if i == 7 else "y"}) for i in range(60)])
    queue.enqueue("b", unique_key="only-me")
    first = operator.text("/jobs?kind=a")
    assert f'href="/jobs/{ids[-1]}"' in first and f'href="/jobs/{ids[0]}"' not in first
    older = f"before={ids[10]}"
    assert older in first
    second = operator.text(f"/jobs?kind=a&{older}")
    assert f'href="/jobs/{ids[0]}"' in second and f'href="/jobs/{ids[10]}"' not in second
    contains = operator.text("/jobs?payload=%7B%22tag%22%3A+%22x%22%7D")
    assert f'href="/jobs/{ids[7]}"' in contains and f'href="/jobs/{ids[8]}"' not in contains
    assert "only-me" not in operator.text("/jobs?unique_key=nobody")
    assert ">b<" in operator.text("/jobs?unique_key=only-me")


def test_bad_filter_is_a_clear_400(operator: Operator) -> None:
    for query, message in [
        ("status=zombie", "zombie"),
        ("payload=%7Bnot+json", "not valid JSON"),
        ("before=abc", "before must be a job id"),
    ]:
        response = operator.get(f"/jobs?{query}")
        assert response.status_code == 400
        assert message in response.get_data(as_text=True)


def test_script_in_payload_and_error_is_shown_as_text(
    queue: pgqueue.Queue, operator: Operator
) -> None:
    attack = "<script>alert('pwned')</script>"
    job_id = dead_job(queue, "evil", {"name": attack})
    with pgqueue.Queue(queue.conninfo, table=queue.table) as q:
        q.enqueue("evil2", {"name": attack})
    for path in ["/", "/jobs", "/dead", f"/jobs/{job_id}"]:
        html = operator.text(path)
        assert "<script>alert" not in html
    detail = operator.text(f"/jobs/{job_id}")
    assert "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in detail


def test_retry_button_revives_a_dead_job(
    queue: pgqueue.Queue, operator: Operator, actions: list[OperatorAction]
) -> None:
    job_id = dead_job(queue)
    operator.text("/dead")
    response = operator.post("/actions/retry", {"id": job_id, "next": "/dead"})
    assert response.status_code == 303
    assert response.headers["location"] == "/dead?done=retried&n=1"
    job = queue.get(job_id)
    assert job is not None and job.status == "pending" and job.attempts == 0
    assert actions == [OperatorAction(ActionName.RETRY, queue.table, "tester", job_ids=(job_id,))]
    assert "1 job(s) retried." in operator.text("/dead?done=retried&n=1")


def test_purge_of_a_selection_deletes_only_dead_jobs(
    queue: pgqueue.Queue, operator: Operator, raw: Raw
) -> None:
    dead = [dead_job(queue) for _ in range(3)]
    alive = queue.enqueue("keep")
    operator.text("/dead")
    response = operator.post("/actions/purge", {"id": [dead[0], dead[1], alive]})
    assert response.status_code == 303
    assert raw.rows("SELECT id FROM {table} ORDER BY id") == [(dead[2],), (alive,)]


def test_every_dead_job_matching_a_filter_after_a_confirmation(
    queue: pgqueue.Queue, operator: Operator, actions: list[OperatorAction]
) -> None:
    mail = [dead_job(queue, "send", queue="mail") for _ in range(3)]
    other = dead_job(queue, "send", queue="billing")
    operator.text("/dead?queue=mail")
    asked = operator.post("/actions/every-dead", {"action": "retry", "queue": "mail"})
    assert asked.status_code == 200
    page = asked.get_data(as_text=True)
    assert "Dead jobs matching now" in page and ">3<" in page
    assert all(queue.get(i).status == "dead" for i in mail)  # type: ignore[union-attr]
    done = operator.post(
        "/actions/every-dead", {"action": "retry", "queue": "mail", "confirm": "yes"}
    )
    assert done.status_code == 303
    assert all(queue.get(i).status == "pending" for i in mail)  # type: ignore[union-attr]
    assert queue.get(other).status == "dead"  # type: ignore[union-attr]
    assert actions[-1].job_ids == tuple(mail)
    assert actions[-1].detail == "every dead job matching: queue=mail"


def test_cancel_of_a_running_job_asks_it_to_stop(
    queue: pgqueue.Queue, operator: Operator, raw: Raw
) -> None:
    job_id = queue.enqueue("long")
    queue.claim(1, worker="w1")
    operator.text("/running")
    assert operator.post("/actions/cancel", {"id": job_id}).status_code == 303
    assert raw.one("SELECT cancel_requested_at IS NOT NULL FROM {table} WHERE id = %s", job_id)
    assert "cancel requested" in operator.text("/running")


def test_pause_and_resume_a_queue(queue: pgqueue.Queue, operator: Operator) -> None:
    queue.enqueue("a", queue="mail")
    operator.text("/queues")
    operator.post("/actions/pause-queue", {"queue": "mail"})
    assert [q.paused for q in queue.queues() if q.name == "mail"] == [True]
    assert queue.claim(1, worker="w", queues=["mail"]) == []
    operator.post("/actions/resume-queue", {"queue": "mail"})
    assert [q.paused for q in queue.queues() if q.name == "mail"] == [False]


def test_schedule_pause_and_trigger_now(queue: pgqueue.Queue, operator: Operator) -> None:
    queue.register_schedules([validate_schedule("report", every=timedelta(hours=1))])
    operator.text("/schedules")
    operator.post("/actions/pause-schedule", {"schedule": "report"})
    assert [s.paused for s in queue.schedules()] == [True]
    response = operator.post("/actions/trigger-schedule", {"schedule": "report"})
    [job] = queue.jobs(kinds=["report"])
    assert response.headers["location"].endswith(f"done=triggered&n={job.id}")
    missing = operator.post("/actions/trigger-schedule", {"schedule": "nope"})
    assert missing.headers["location"].endswith("done=no-schedule")


def test_set_limit(queue: pgqueue.Queue, operator: Operator) -> None:
    operator.text("/limits")
    operator.post("/actions/set-limit", {"key": "api", "max_running": "7"})
    assert [(lim.key, lim.max_running) for lim in queue.limits()] == [("api", 7)]


def test_read_only_user_sees_pages_but_cannot_act(
    queue: pgqueue.Queue, dashboard: Dashboard
) -> None:
    job_id = dead_job(queue)
    reader = Operator(dashboard.wsgi)
    page = reader.get("/dead", headers={"X-Role": "read"}).get_data(as_text=True)
    assert "Retry selected" not in page and "(read-only)" in page
    assert reader.token == ""
    reader.get("/dead")  # as admin, with the same cookie: a valid token, so only the role refuses
    assert reader.token
    response = reader.client.post(
        "/actions/retry",
        data={"id": job_id, "csrf": reader.token},
        headers={"X-Role": "read", "Origin": "http://localhost"},
    )
    assert response.status_code == 403
    assert queue.get(job_id).status == "dead"  # type: ignore[union-attr]


def test_refused_when_authorize_says_no(queue: pgqueue.Queue, dashboard: Dashboard) -> None:
    stranger = Operator(dashboard.wsgi)
    for path in PAGES:
        assert stranger.get(path, headers={"X-Role": "none"}).status_code == 403


@pytest.mark.parametrize(
    ("how", "post"),
    [
        ("no token", {"token": False}),
        ("wrong token", {"data": {"csrf": "0" * 64}}),
        ("other origin", {"origin": "http://evil.example"}),
        ("no origin", {"origin": None}),
    ],
)
def test_cross_site_post_is_refused(
    queue: pgqueue.Queue, operator: Operator, how: str, post: dict[str, Any]
) -> None:
    job_id = dead_job(queue)
    operator.text("/dead")
    data = {"id": job_id, **post.pop("data", {})}
    if "csrf" in data:
        response = operator.post("/actions/retry", data, token=False)
    else:
        response = operator.post("/actions/retry", data, **post)
    assert response.status_code == 403, how
    assert queue.get(job_id).status == "dead", how  # type: ignore[union-attr]


def test_a_token_from_another_browser_is_refused(
    queue: pgqueue.Queue, dashboard: Dashboard
) -> None:
    job_id = dead_job(queue)
    victim, attacker = Operator(dashboard.wsgi), Operator(dashboard.wsgi)
    victim.text("/dead")
    attacker.text("/dead")
    victim.token = attacker.token  # the attacker's token, in the victim's browser
    assert victim.post("/actions/retry", {"id": job_id}).status_code == 403
    assert queue.get(job_id).status == "dead"  # type: ignore[union-attr]


def test_pages_forbid_inline_scripts_and_framing(operator: Operator) -> None:
    response = operator.get("/")
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "HttpOnly" in response.headers["set-cookie"]


def test_htmx_is_served_from_the_package(operator: Operator) -> None:
    response = operator.get("/static/htmx.min.js")
    assert response.status_code == 200
    assert b"htmx" in response.data[:2000]
    assert "/static/htmx.min.js" in operator.text("/")


def test_authorize_is_required(queue: pgqueue.Queue) -> None:
    with pytest.raises(TypeError):
        Dashboard(queue, authorize=None)  # type: ignore[arg-type]


def test_redirect_after_an_action_stays_on_the_dashboard(
    queue: pgqueue.Queue, operator: Operator
) -> None:
    job_id = dead_job(queue)
    operator.text("/dead")
    response = operator.post("/actions/retry", {"id": job_id, "next": "//evil.example/x"})
    assert response.headers["location"].startswith("/?done=retried")


def test_dead_jobs_are_found_through_their_index(queue: pgqueue.Queue, raw: Raw) -> None:
    core = DashboardCore(queue.table)
    steps = [
        next(core.count_dead(JobFilter()).plan),
        next(core.jobs(JobFilter(status=pgqueue.JobStatus.DEAD)).plan),
        # The overview's counts, dead jobs among them (`pgqueue.core.queue.counts`).
        Query(core.queue.sql.inspect.counted, {"pairs": 10, "cap": 10}),
    ]
    raw.conn.execute("SET enable_seqscan = off")  # a tiny table: can the index serve?
    for step in steps:
        assert isinstance(step, Query)
        query, params = step.query, step.params
        plan = raw.conn.execute(b"EXPLAIN " + query, params).fetchall()
        assert f"{queue.table}_dead" in str(plan), plan


def settings_of(dashboard: Dashboard) -> dict[str, str]:
    """The session settings of a connection of the dashboard's pool."""

    def plan() -> Plan[dict[str, str]]:
        rows = yield Query(
            b"SELECT name, setting FROM pg_settings WHERE name IN"
            b" ('max_parallel_workers_per_gather', 'default_transaction_read_only',"
            b" 'statement_timeout')"
        )
        return dict(rows)

    result: dict[str, str] = dashboard._run(Operation(plan()))
    return result


def test_sessions_take_no_parallel_worker_and_read_only_ones_are_read_only_in_the_database(
    queue: pgqueue.Queue,
) -> None:
    with Dashboard(queue, authorize=lambda r: "admin") as dashboard:
        assert settings_of(dashboard) == {
            "max_parallel_workers_per_gather": "0",
            "default_transaction_read_only": "off",
            "statement_timeout": "2000",
        }
    with Dashboard(queue, authorize=lambda r: "admin", read_only=True) as dashboard:
        assert settings_of(dashboard)["default_transaction_read_only"] == "on"
        # An admin role is read-only here: no action is shown or taken.
        operator = Operator(dashboard.wsgi)
        assert "(read-only)" in operator.text("/")
        job_id = dead_job(queue)
        operator.get("/dead")
        assert operator.post("/actions/retry", {"id": str(job_id)}).status_code == 403
