"""The dashboard under the roles docs/dashboard.md grants, and no more.

The owner (the server's superuser) installs the table; the dashboard then
logs in as a role with only the documented grants: the read-only role sees
every page (a finished job's page says its history is not readable, rather
than failing) and its sessions cannot write even if the application let
them; the admin role also acts. Any privilege the dashboard needs beyond
the documented grants fails a test here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgqueue
from pgqueue.web import Dashboard

from ..conftest import Raw
from .conftest import Operator, dead_job

# docs/dashboard.md, "Roles and grants", word for word but for the names.
READ_GRANTS = (
    "GRANT USAGE ON SCHEMA public TO {role}",
    "GRANT SELECT ON {table}, {queues}, {schedules}, {results}, {limits}, {slots}, {dependencies}"
    " TO {role}",
)
ADMIN_GRANTS = (
    "GRANT USAGE ON SCHEMA public TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {role}",
    "GRANT USAGE ON SEQUENCE {sequence} TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON {queues}, {leases}, {schedules} TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON {results}, {limits}, {slots}, {dependencies}"
    " TO {role}",
    "GRANT SELECT, INSERT ON {history} TO {role}",
)
PAGES = ("/", "/jobs", "/dead", "/running", "/queues", "/schedules", "/limits")


@pytest.fixture
def role_dsn(dsn: str, table: str, raw: Raw) -> Iterator[Callable[[tuple[str, ...]], str]]:
    """Makes a login role with the given grants on the installed queue: its DSN."""
    with pgqueue.Queue(dsn, table=table) as owner:
        owner.install()
    made: list[sql.Identifier] = []
    names = {
        "table": sql.Identifier(table),
        "sequence": sql.Identifier(f"{table}_id_seq"),
        "history": sql.Identifier(f"{table}_history"),
        "queues": sql.Identifier(f"{table}_queues"),
        "leases": sql.Identifier(f"{table}_unique_leases"),
        "schedules": sql.Identifier(f"{table}_schedules"),
        "results": sql.Identifier(f"{table}_results"),
        "limits": sql.Identifier(f"{table}_limits"),
        "slots": sql.Identifier(f"{table}_limit_slots"),
        "dependencies": sql.Identifier(f"{table}_dependencies"),
    }

    def make(grants: tuple[str, ...]) -> str:
        role = f"pgqueue_dash_{uuid.uuid4().hex[:8]}"
        made.append(sql.Identifier(role))
        raw.conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(made[-1]))
        for grant in grants:
            raw.conn.execute(sql.SQL(grant).format(role=made[-1], **names))
        return make_conninfo(dsn, user=role)

    try:
        yield make
    finally:
        for role in made:
            raw.conn.execute(sql.SQL("DROP OWNED BY {}").format(role))
            raw.conn.execute(sql.SQL("DROP ROLE {}").format(role))


def finished_job(q: pgqueue.Queue) -> int:
    job_id = q.enqueue("done_already")
    [job] = q.claim(1, worker="w", kinds=["done_already"])
    q.complete(job)
    return job_id


def test_read_only_role_sees_every_page_and_cannot_write(
    queue: pgqueue.Queue, table: str, role_dsn: Callable[[tuple[str, ...]], str]
) -> None:
    dead = dead_job(queue, "broken", {"n": 1})
    done = finished_job(queue)
    with Dashboard(
        role_dsn(READ_GRANTS), table=table, authorize=lambda r: "admin", read_only=True
    ) as dashboard:
        operator = Operator(dashboard.wsgi)
        for path in (*PAGES, f"/jobs/{dead}"):
            assert operator.get(path).status_code == 200, path
        finished = operator.get(f"/jobs/{done}")
        assert finished.status_code == 404  # not in the table: it finished
        assert "History not readable" in finished.get_data(as_text=True)
        # The page offers no action, a post is refused ...
        assert "Retry" not in operator.text(f"/jobs/{dead}")
        assert operator.post("/actions/retry", {"id": str(dead)}).status_code == 403
        # ... and the database refuses a write on its sessions even if asked.
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            dashboard._run(dashboard.core.retry([dead]))
    job = queue.get(dead)
    assert job is not None and job.status == "dead"


def test_admin_role_with_the_documented_grants_acts(
    queue: pgqueue.Queue, table: str, role_dsn: Callable[[tuple[str, ...]], str]
) -> None:
    retried = dead_job(queue, "broken")
    purged = dead_job(queue, "broken")
    running = queue.enqueue("long", queue="images")
    queue.claim(1, worker="w", kinds=["long"])
    done = finished_job(queue)
    with Dashboard(
        role_dsn(ADMIN_GRANTS), table=table, authorize=lambda r: "admin", history=True
    ) as dashboard:
        operator = Operator(dashboard.wsgi)
        for path in (*PAGES, f"/jobs/{retried}"):
            assert operator.get(path).status_code == 200, path
        assert "History not readable" not in operator.get(f"/jobs/{done}").get_data(as_text=True)
        operator.get("/dead")
        for action, form in (
            ("/actions/retry", {"id": str(retried)}),
            ("/actions/purge", {"id": str(purged)}),
            ("/actions/cancel", {"id": str(running)}),
            ("/actions/pause-queue", {"queue": "images"}),
            ("/actions/set-limit", {"key": "api", "max_running": "2"}),
        ):
            response = operator.post(action, form)
            assert response.status_code == 303, (action, response.get_data(as_text=True)[:300])
    job = queue.get(retried)
    assert job is not None and job.status == "pending"
    assert queue.get(purged) is None
    job = queue.get(running)
    assert job is not None and job.cancel_requested
    assert [q.paused for q in queue.queues() if q.name == "images"] == [True]
