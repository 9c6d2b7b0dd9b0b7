"""pgqueue.contrib.flask: the extension's queue joins the request's transaction,
its handlers run in the app's context, its settings are checked at init_app."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from flask import Flask, current_app
from psycopg import sql
from sqlalchemy import create_engine, text
from sqlalchemy.orm import scoped_session, sessionmaker

import pgqueue
from pgqueue.contrib.flask import PgQueue
from pgqueue.contrib.sqlalchemy import psycopg_connection

from ..conftest import Raw


@pytest.fixture
def orders(dsn: str, table: str) -> Iterator[sql.Identifier]:
    name = sql.Identifier(f"{table}_orders")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id serial PRIMARY KEY, item text)").format(name))
    yield name
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE {}").format(name))


@pytest.fixture
def pgq() -> PgQueue:
    return PgQueue()


@pytest.fixture
def app(dsn: str, table: str, pgq: PgQueue) -> Iterator[Flask]:
    app = Flask(__name__)
    app.config.update(PGQUEUE_DSN=dsn, PGQUEUE_TABLE=table, PGQUEUE_MAX_CONNECTIONS=2)
    pgq.init_app(app)
    with app.app_context():
        pgq.queue.install()
    yield app
    pgq.close(app)


def items(raw: Raw, orders: sql.Identifier) -> list[str]:
    rows = raw.conn.execute(sql.SQL("SELECT item FROM {} ORDER BY id").format(orders))
    return [r[0] for r in rows]


def test_enqueue_in_a_view_transaction_commits_with_its_rows_or_not_at_all(
    app: Flask, pgq: PgQueue, orders: sql.Identifier, raw: Raw
) -> None:
    insert = sql.SQL("INSERT INTO {} (item) VALUES (%s)").format(orders)

    @app.post("/orders/<item>")
    def create_order(item: str) -> dict[str, Any]:
        with pgq.transaction() as conn:
            conn.execute(insert, (item,))
            job_id = pgq.enqueue("send_receipt", {"item": item})
            if item == "declined":
                raise LookupError("payment declined")
        return {"job_id": job_id}

    client = app.test_client()
    committed = client.post("/orders/teapot")
    assert committed.status_code == 200
    assert client.post("/orders/declined").status_code == 500  # raised in the transaction
    assert items(raw, orders) == ["teapot"]
    assert [r[0] for r in raw.rows("SELECT id FROM {table}")] == [committed.json["job_id"]]  # type: ignore[index]


def test_enqueue_outside_a_transaction_commits_at_once(app: Flask, pgq: PgQueue, raw: Raw) -> None:
    with app.app_context():
        job_id = pgq.enqueue("send_receipt", {"order_id": 1}, priority=5)
        ids = pgq.enqueue_many([("send_receipt", {"order_id": 2})])
    assert sorted(r[0] for r in raw.rows("SELECT id FROM {table}")) == [job_id, *ids]
    assert raw.one("SELECT priority FROM {table} WHERE id = %s", job_id) == 5


def test_a_nested_transaction_is_a_savepoint(app: Flask, pgq: PgQueue, raw: Raw) -> None:
    with app.app_context(), pgq.transaction() as outer:
        kept = pgq.enqueue("kept")
        with pytest.raises(LookupError), pgq.transaction() as inner:
            assert inner is outer
            pgq.enqueue("dropped")
            raise LookupError("only the savepoint rolls back")
    assert [r[0] for r in raw.rows("SELECT id FROM {table}")] == [kept]


def test_connection_loader_joins_the_apps_own_sqlalchemy_session(
    dsn: str, app: Flask, pgq: PgQueue, orders: sql.Identifier, raw: Raw
) -> None:
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn))
    db_session = scoped_session(sessionmaker(engine))

    @pgq.connection_loader
    def session_connection() -> psycopg.Connection[Any]:
        return psycopg_connection(db_session)

    insert = text(f"INSERT INTO {orders.as_string()} (item) VALUES (:item)")
    try:
        with app.app_context():
            db_session.execute(insert, {"item": "kettle"})
            pgq.enqueue("send_receipt", {"item": "kettle"})
            db_session.rollback()
            db_session.execute(insert, {"item": "teapot"})
            job_id = pgq.enqueue("send_receipt", {"item": "teapot"})
            db_session.commit()
    finally:
        db_session.remove()
        engine.dispose()
    assert items(raw, orders) == ["teapot"]
    assert [r[0] for r in raw.rows("SELECT id FROM {table}")] == [job_id]


def test_worker_runs_the_handlers_in_the_apps_context(
    app: Flask, pgq: PgQueue, orders: sql.Identifier, raw: Raw
) -> None:
    app.config["GREETING"] = "hello"
    insert = sql.SQL("INSERT INTO {} (item) VALUES (%s)").format(orders)

    @pgq.handler("greet")
    def greet(job: pgqueue.Job) -> None:
        with pgq.transaction() as conn:  # the app's pool, through the app's context
            conn.execute(insert, (f"{current_app.config['GREETING']} {job.payload['name']}",))

    with app.app_context():
        pgq.enqueue_many([("greet", {"name": "ann"}), ("greet", {"name": "bob"})])
    worker = pgq.worker(app, concurrency=1, handle_signals=False)
    assert worker.settings.concurrency == 1
    worker.run(until_empty=True)
    assert items(raw, orders) == ["hello ann", "hello bob"]
    assert raw.count() == 0


def test_a_task_enqueued_in_a_view_commits_with_its_rows_and_runs_in_the_apps_context(
    app: Flask, pgq: PgQueue, orders: sql.Identifier, raw: Raw
) -> None:
    app.config["GREETING"] = "hello"
    insert = sql.SQL("INSERT INTO {} (item) VALUES (%s)").format(orders)

    @pgq.task(max_attempts=2)
    def greet(name: str, *, loud: bool = False) -> None:
        greeting = f"{current_app.config['GREETING']} {name}"
        with pgq.transaction() as conn:  # the app's pool, through the app's context
            conn.execute(insert, (greeting.upper() if loud else greeting,))

    @app.post("/greet/<name>")
    def create(name: str) -> dict[str, Any]:
        with pgq.transaction():
            job_id = greet.enqueue(name, loud=name == "bob")  # joins the view's transaction
            if name == "declined":
                raise LookupError("rolled back, with its job")
        return {"job_id": job_id}

    client = app.test_client()
    assert client.post("/greet/ann").status_code == 200
    assert client.post("/greet/declined").status_code == 500
    assert client.post("/greet/bob").status_code == 200
    assert raw.count() == 2
    assert raw.one("SELECT max_attempts FROM {table} LIMIT 1") == 2
    pgq.worker(app, concurrency=1, handle_signals=False).run(until_empty=True)
    assert items(raw, orders) == ["hello ann", "HELLO BOB"]
    assert raw.count() == 0
    with app.app_context():
        greet("cal")  # calling the task calls the function, here and now
    assert items(raw, orders)[-1] == "hello cal"


def test_a_task_refuses_bad_arguments_and_a_kind_taken_writing_nothing(
    app: Flask, pgq: PgQueue, raw: Raw
) -> None:
    @pgq.task(kind="receipts.send")
    def send(order_id: int) -> None: ...

    with app.app_context():
        with pytest.raises(TypeError):
            send.enqueue(1, 2)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="not JSON-serialisable"):
            send.enqueue(object())  # type: ignore[arg-type]
    assert raw.count() == 0
    with pytest.raises(ValueError, match="is a task already"):
        pgq.handler("receipts.send")(lambda job: None)
    with pytest.raises(TypeError, match="async"):

        @pgq.task
        async def not_here() -> None: ...


def test_worker_options_come_from_the_setting_then_the_call(app: Flask, pgq: PgQueue) -> None:
    app.config["PGQUEUE_WORKER"] = {"concurrency": 3, "batch_size": 7}
    worker = pgq.worker(app, batch_size=9)
    assert (worker.settings.concurrency, worker.settings.batch_size) == (3, 9)


def test_migrate_command_installs_the_schema(dsn: str, table: str, pgq: PgQueue) -> None:
    app = Flask(__name__)
    app.config.update(PGQUEUE_DSN=dsn, PGQUEUE_TABLE=table)
    pgq.init_app(app)
    first = app.test_cli_runner().invoke(args=["pgqueue", "migrate"])
    assert first.exit_code == 0, first.output
    assert first.output.startswith("applied migrations [1, ")
    again = app.test_cli_runner().invoke(args=["pgqueue", "migrate"])
    assert again.output == "the schema is up to date\n"


def test_worker_command_refuses_bad_options_before_running(app: Flask) -> None:
    runner = app.test_cli_runner()
    bad = runner.invoke(args=["pgqueue", "worker", "--concurrency", "0"])
    assert bad.exit_code == 2
    assert "--concurrency" in bad.output
    app.config["PGQUEUE_WORKER"] = {"concurrency": -1}
    bad = runner.invoke(args=["pgqueue", "worker"])
    assert bad.exit_code == 2
    assert "cannot build the worker" in bad.output


def test_worker_processes_need_an_app_they_can_load_themselves(app: Flask) -> None:
    runner = app.test_cli_runner()  # the app comes from a function, not an import path
    bad = runner.invoke(args=["pgqueue", "worker", "--processes", "2"])
    assert bad.exit_code == 2
    assert "--processes needs the app named by --app or FLASK_APP" in bad.output
    bad = runner.invoke(args=["pgqueue", "worker", "--max-jobs-per-child", "3"])
    assert bad.exit_code == 2
    assert "--max-jobs-per-child needs --processes" in bad.output


def test_bad_settings_are_refused_at_init_app(dsn: str, pgq: PgQueue) -> None:
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({}, ValueError, "PGQUEUE_DSN is not set"),
        ({"PGQUEUE_DSN": dsn, "PGQUEUE_TABLE": "jobs; DROP TABLE x"}, ValueError, "table"),
        ({"PGQUEUE_DSN": dsn, "PGQUEUE_MAX_CONNECTIONS": 0}, ValueError, "MAX_CONNECTIONS"),
        ({"PGQUEUE_DSN": dsn, "PGQUEUE_WORKER": 4}, TypeError, "PGQUEUE_WORKER"),
        (
            {"PGQUEUE_DSN": dsn, "PGQUEUE_WORKER": {"concurency": 8}},
            TypeError,
            "PGQUEUE_WORKER: unknown worker option 'concurency' \\(did you mean 'concurrency'",
        ),
        (
            {"PGQUEUE_DSN": dsn, "PGQUEUE_WORKER": {"concurrency": 0}},
            ValueError,
            "PGQUEUE_WORKER: concurrency must be at least 1",
        ),
        ({"PGQUEUE_DSN": dsn, "PGQUEUE_TRANSACTION_POOLING": "yes"}, TypeError, "POOLING"),
    ]
    for config, error, message in cases:
        app = Flask(__name__)
        app.config.update(config)
        with pytest.raises(error, match=message):
            pgq.init_app(app)
        assert "pgqueue" not in app.extensions


def test_an_app_without_init_app_and_an_async_handler_are_refused(pgq: PgQueue) -> None:
    with Flask(__name__).app_context(), pytest.raises(RuntimeError, match="init_app"):
        _ = pgq.queue

    async def handler(job: pgqueue.Job) -> None:  # pragma: no cover - never called
        pass

    with pytest.raises(TypeError, match="async"):
        pgq.handler("greet")(handler)
