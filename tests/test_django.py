"""pgqueue.contrib.django against the real server: the test project in tests/django_project.

The project gets a database of its own on the suite's server, set up once
for the module (Django is configured once per process); each test starts
from empty tables.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import django
import psycopg
import pytest
from django.core.exceptions import ImproperlyConfigured
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgqueue.contrib.django.conf import read_settings

TABLE = "shop_jobs"


@pytest.fixture(scope="module")
def project(dsn: str) -> Iterator[str]:
    """The test project, configured and migrated on a new database: that database's DSN."""
    name = f"dj_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    db_dsn = make_conninfo(dsn, dbname=name)
    os.environ["PGQUEUE_DJANGO_DSN"] = db_dsn
    os.environ["PGQUEUE_DJANGO_TABLE"] = TABLE
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.django_project.settings"
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("pgqueue_migrate", stdout=open(os.devnull, "w"))  # noqa: SIM115
    try:
        yield db_dsn
    finally:
        from django.db import connections

        from pgqueue.contrib.django import close_queue

        close_queue()
        connections.close_all()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def db(project: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection of its own to the project's database, tables emptied first."""
    with psycopg.connect(project, autocommit=True) as conn:
        conn.execute(f"TRUNCATE shop_order, shop_ran, {TABLE}, {TABLE}_results RESTART IDENTITY")
        yield conn


def jobs(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Every job: kind, payload, queue, priority, status."""
    query = f"SELECT kind, payload, queue, priority, status FROM {TABLE} ORDER BY id"
    return conn.execute(query).fetchall()


def ran(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    return [(w, a) for w, a in conn.execute("SELECT what, arg FROM shop_ran ORDER BY id")]


def drain(*args: str) -> str:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("pgqueue_worker", "--until-empty", *args, stdout=out)
    return out.getvalue()


class Rollback(Exception):
    pass


# -- enqueue on Django's connection ------------------------------------------------------------


def test_rolled_back_atomic_block_leaves_no_job(db: psycopg.Connection[Any]) -> None:
    from django.db import transaction

    from pgqueue.contrib import django as pgq
    from tests.django_project.shop.models import Order

    with pytest.raises(Rollback), transaction.atomic():
        order = Order.objects.create(item="teapot")
        pgq.enqueue("print_label", {"order_id": order.pk})
        raise Rollback

    assert Order.objects.count() == 0
    assert jobs(db) == []


def test_committed_atomic_block_leaves_its_job(db: psycopg.Connection[Any]) -> None:
    from django.db import transaction

    from pgqueue.contrib import django as pgq
    from tests.django_project.shop.models import Order

    with transaction.atomic():
        order = Order.objects.create(item="teapot")
        job_id = pgq.enqueue("print_label", {"order_id": order.pk}, queue="labels", priority=5)
        # Written in the block's transaction: no other connection sees it yet.
        assert jobs(db) == []

    assert jobs(db) == [("print_label", {"order_id": order.pk}, "labels", 5, "pending")]
    assert pgq.get_queue().get(job_id) is not None


def test_enqueue_opens_no_pool_of_its_own(db: psycopg.Connection[Any]) -> None:
    from pgqueue.contrib import django as pgq

    pgq.close_queue()
    pgq.enqueue("print_label", {"order_id": 1})
    assert pgq.get_queue()._driver.pool.closed  # Django's connection carried the job
    assert len(jobs(db)) == 1


def test_enqueue_many_and_cancel_follow_the_atomic_block(db: psycopg.Connection[Any]) -> None:
    from django.db import transaction

    from pgqueue.contrib import django as pgq

    with pytest.raises(Rollback), transaction.atomic():
        pgq.enqueue_many([("print_label", {"order_id": n}) for n in range(3)])
        raise Rollback
    assert jobs(db) == []

    ids = pgq.enqueue_many([("print_label", {"order_id": n}) for n in range(3)])
    with pytest.raises(Rollback), transaction.atomic():
        assert pgq.cancel(ids[0]).deleted == [ids[0]]
        raise Rollback
    assert len(jobs(db)) == 3
    with transaction.atomic():
        pgq.cancel(ids[0])
    assert len(jobs(db)) == 2


def test_bad_payload_is_refused_and_writes_nothing(db: psycopg.Connection[Any]) -> None:
    from django.db import transaction

    from pgqueue.contrib import django as pgq
    from tests.django_project.shop.models import Order

    with transaction.atomic():
        Order.objects.create(item="teapot")
        with pytest.raises(TypeError, match="not JSON-serialisable"):
            pgq.enqueue("print_label", {"order": object()})
    assert Order.objects.count() == 1  # the block itself was not broken
    assert jobs(db) == []


def test_worker_command_drains_handlers_and_tasks(db: psycopg.Connection[Any]) -> None:
    from pgqueue.contrib import django as pgq
    from tests.django_project.shop.models import Order
    from tests.django_project.shop.tasks import send_receipt

    order = Order.objects.create(item="teapot")
    pgq.enqueue("print_label", {"order_id": order.pk})
    result = send_receipt.enqueue(order.pk)

    out = drain()

    assert "django.task" in out and "print_label" in out
    assert sorted(ran(db)) == [("print_label", str(order.pk)), ("send_receipt", str(order.pk))]
    assert Order.objects.get(pk=order.pk).receipt_sent
    assert jobs(db) == []
    result.refresh()
    assert result.status == "SUCCESSFUL"
    assert result.return_value == {"order": order.pk, "item": "teapot"}


def test_worker_command_serves_only_the_queues_given(db: psycopg.Connection[Any]) -> None:
    from tests.django_project.shop.tasks import record

    record.using(queue_name="emails").enqueue("mail")
    record.enqueue("plain")

    drain("--queues", "emails")

    assert ran(db) == [("record", "mail")]
    assert [j[2] for j in jobs(db)] == ["default"]


def test_worker_command_runs_worker_processes_replaced_after_their_jobs(
    db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    from tests.django_project.shop.tasks import record

    for i in range(6):
        record.enqueue(str(i))

    with caplog.at_level(logging.INFO, logger="pgqueue.cli"):
        out = drain("--processes", "2", "--max-jobs-per-child", "2")

    # Each in a process set up from the settings module, each run once.
    assert sorted(ran(db)) == [("record", str(i)) for i in range(6)]
    assert jobs(db) == []
    assert "worker processes stopped" in out
    # Two that stop with a job or none left; the other four jobs ran in retired ones.
    assert "retired after" in caplog.text


def test_pgqueue_migrate_is_idempotent(project: str) -> None:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("pgqueue_migrate", stdout=out)
    assert out.getvalue().startswith(f"{TABLE}: schema at version ")
    assert "up to date" in out.getvalue()


# -- the django.tasks backend --------------------------------------------------------------------


def test_task_enqueued_in_rolled_back_atomic_block_leaves_no_job(
    db: psycopg.Connection[Any],
) -> None:
    from django.db import transaction

    from tests.django_project.shop.models import Order
    from tests.django_project.shop.tasks import send_receipt

    with pytest.raises(Rollback), transaction.atomic():
        order = Order.objects.create(item="teapot")
        send_receipt.enqueue(order.pk)
        raise Rollback
    assert jobs(db) == []

    with transaction.atomic():
        order = Order.objects.create(item="teapot")
        result = send_receipt.enqueue(order.pk)
    assert [j[0] for j in jobs(db)] == ["django.task"]
    assert send_receipt.get_result(result.id).status == "READY"


def test_task_enqueue_keeps_queue_priority_arguments_and_run_after(
    db: psycopg.Connection[Any],
) -> None:
    from django.utils import timezone

    from tests.django_project.shop.tasks import record, send_receipt

    later = timezone.now() + timedelta(hours=1)
    result = record.using(priority=7, run_after=later).enqueue(label="late")

    assert result.status == "READY"
    assert result.id.isdigit()
    (kind, payload, queue, priority, status) = jobs(db)[0]
    assert (kind, queue, priority, status) == ("django.task", "default", 7, "pending")
    assert payload["task"] == "tests.django_project.shop.tasks.record"
    assert payload["args"] == [] and payload["kwargs"] == {"label": "late"}
    run_at = db.execute(f"SELECT run_at FROM {TABLE}").fetchone()
    assert run_at is not None and run_at[0] == later

    again = record.get_result(result.id)
    assert again.status == "READY"
    assert again.kwargs == {"label": "late"}
    assert again.task.priority == 7 and again.task.queue_name == "default"
    assert again.enqueued_at is not None and again.attempts == 0
    assert send_receipt.get_result(send_receipt.enqueue(3).id).task.queue_name == "emails"

    # Not due yet: a worker that drains what is ready leaves it waiting.
    drain()
    assert ran(db) == []
    assert record.get_result(result.id).status == "READY"


def test_higher_priority_tasks_run_first(db: psycopg.Connection[Any]) -> None:
    from django.test import override_settings

    from tests.django_project.shop.tasks import record

    for priority in (-5, 0, 50, 10, -100, 100):
        record.using(priority=priority).enqueue(str(priority))

    # One claim takes the lot, run one at a time. (With smaller batches, a
    # worker whose runners ran dry sends two claims side by side, and the one
    # that lands first may hold the lower priorities: docs/queues.md.)
    settings = {"TABLE": TABLE, "WORKER": {"concurrency": 1, "batch_size": 10}}
    with override_settings(PGQUEUE=settings):
        drain()

    assert [a for _, a in ran(db)] == ["100", "50", "10", "0", "-5", "-100"]


def test_failed_task_result_is_failed_with_its_exception(db: psycopg.Connection[Any]) -> None:
    from tests.django_project.shop.tasks import OutOfStock, reserve

    result = reserve.enqueue("teapot")
    drain()

    failed = reserve.get_result(result.id)
    assert failed.status == "FAILED"
    assert failed.is_finished
    assert failed.attempts == 1
    (error,) = failed.errors
    assert error.exception_class is OutOfStock
    assert "no teapot left" in error.traceback
    assert "tasks.py" in error.traceback  # the task's own frames
    with pytest.raises(ValueError, match="failed"):
        _ = failed.return_value


def test_failed_attempt_to_be_retried_is_ready_with_its_error(
    db: psycopg.Connection[Any],
) -> None:
    from tests.django_project.shop.tasks import reserve

    result = reserve.using(backend="retrying").enqueue("kettle")
    drain()  # the retry waits for its backoff: not ready, so the drain ends

    again = reserve.get_result(result.id)
    assert again.status == "READY"
    assert again.backend == "retrying" and again.task.backend == "retrying"
    assert again.attempts == 1
    (error,) = again.errors
    assert error.exception_class_path == "tests.django_project.shop.tasks.OutOfStock"
    assert db.execute(f"SELECT attempts, max_attempts FROM {TABLE}").fetchall() == [(1, 3)]


def test_task_with_context_sees_its_result_id_and_attempt(db: psycopg.Connection[Any]) -> None:
    from tests.django_project.shop.tasks import whoami

    result = whoami.enqueue("me")
    drain()
    done = whoami.get_result(result.id)
    assert done.status == "SUCCESSFUL"
    assert done.return_value == {"id": result.id, "attempt": 1, "label": "me"}
    assert done.attempts == 1 and done.worker_ids[0] != "unknown"
    assert done.started_at is not None and done.finished_at is not None
    assert done.enqueued_at is not None and done.enqueued_at <= done.started_at


def test_async_task_and_async_api(db: psycopg.Connection[Any]) -> None:
    from tests.django_project.shop.tasks import add

    async def enqueue() -> Any:
        return await add.aenqueue(2, 3)

    result = asyncio.run(enqueue())
    drain()

    async def fetch() -> Any:
        return await add.aget_result(result.id)

    done = asyncio.run(fetch())
    assert done.status == "SUCCESSFUL"
    assert done.return_value == 5


def test_unknown_or_foreign_result_ids_do_not_exist(db: psycopg.Connection[Any]) -> None:
    from pgqueue.contrib import django as pgq
    from pgqueue.contrib.django.tasks_api import TaskResultDoesNotExist, task_backends

    backend = task_backends["default"]
    foreign = pgq.enqueue("print_label", {"order_id": 1})
    for result_id in ("12345", "abc", "-1", str(foreign)):
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(result_id)


def test_task_arguments_that_are_not_json_write_nothing(db: psycopg.Connection[Any]) -> None:
    from tests.django_project.shop.tasks import record

    with pytest.raises(TypeError):
        record.enqueue(object())  # type: ignore[arg-type]
    assert jobs(db) == []


# -- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"TABEL": "jobs"}, "unknown keys"),
        ({"TABLE": ""}, "TABLE"),
        ({"MAX_CONNECTIONS": 0}, "MAX_CONNECTIONS"),
        ({"HANDLERS": {"kind": 3}}, "HANDLERS"),
        ({"TRANSACTION_POOLING": 1}, "TRANSACTION_POOLING"),
        ("jobs", "must be a dict"),
    ],
)
def test_bad_pgqueue_setting_is_refused_by_name(raw: object, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        read_settings(raw)


def test_transaction_pooling_setting_reaches_the_queue_and_its_pool(project: str) -> None:
    from django.test import override_settings

    from pgqueue.contrib import django as pgq

    for pooling in (False, True):
        with override_settings(PGQUEUE={"TABLE": TABLE, "TRANSACTION_POOLING": pooling}):
            pgq.close_queue()
            try:
                queue = pgq.get_queue()
                assert queue.core.transaction_pooling is pooling
                kwargs = queue.connection_settings()[1]
                assert (kwargs.get("prepare_threshold", 5) is None) is pooling
            finally:
                pgq.close_queue()


def test_unsafe_table_name_is_refused_before_connecting(project: str) -> None:
    from django.test import override_settings

    from pgqueue.contrib import django as pgq

    with (
        override_settings(PGQUEUE={"TABLE": "jobs; DROP TABLE x"}),
        pytest.raises(ImproperlyConfigured, match="PGQUEUE"),
    ):
        pgq.get_queue()


def test_worker_command_takes_the_settings_and_names_its_migrate_command(
    db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    from django.test import override_settings

    out = drain("--name", "box-1", "--batch-size", "3", "--call-timeout", "30s")
    assert out.startswith("pgqueue worker box-1 on shop_jobs: ")
    assert out.endswith("pgqueue worker box-1 stopped\n")

    with (
        override_settings(PGQUEUE={"TABLE": "shop_never_installed"}),
        pytest.raises(SystemExit) as exited,
    ):
        drain()
    assert exited.value.code == 1
    [error] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert error.endswith(
        "the queue's table shop_never_installed is not installed; "
        "run `manage.py pgqueue_migrate` first"
    )


# -- pgqueue.testing in a test's transaction (docs/testing.md, "Django") ----------------------


def test_testing_helpers_see_and_run_the_jobs_of_a_rolled_back_test_transaction(
    db: psycopg.Connection[Any],
) -> None:
    from django.db import transaction

    import tests.django_project.shop.jobs  # noqa: F401  (registers print_label)
    from pgqueue.contrib import django as pgq
    from pgqueue.testing import assert_enqueued, assert_not_enqueued, drain
    from tests.django_project.shop.models import Order, Ran

    with transaction.atomic():  # as django.test.TestCase runs each test
        order = Order.objects.create(item="teapot")
        pgq.enqueue("print_label", {"order_id": order.pk})
        queue, conn = pgq.get_queue(), pgq.connection()

        assert_enqueued(queue, "print_label", payload={"order_id": order.pk}, conn=conn)
        drained = drain(queue, pgq.registered_handlers(), conn=conn)

        assert len(drained.succeeded) == 1 and drained.dead == []
        # The handler ran here, with the ORM on the test's connection.
        assert list(Ran.objects.values_list("what", "arg")) == [("print_label", str(order.pk))]
        assert_not_enqueued(queue, conn=conn)
        transaction.set_rollback(True)

    assert jobs(db) == [] and ran(db) == []


def _testing_helpers_case() -> type:
    """A `django.test.TestCase` of the helpers, made once Django is configured."""
    from django.test import TestCase

    from pgqueue.contrib import django as pgq
    from pgqueue.contrib.django import testing as pgq_testing
    from tests.django_project.shop.models import Order, Ran
    from tests.django_project.shop.tasks import send_receipt

    class CheckoutTests(TestCase):
        def test_checkout_enqueues_and_the_drain_runs_it(self) -> None:
            order = Order.objects.create(item="teapot")
            pgq.enqueue("print_label", {"order_id": order.pk})
            send_receipt.enqueue(order.pk)  # a Django task, on pgqueue's backend

            pgq_testing.assert_enqueued("print_label", payload={"order_id": order.pk})
            pgq_testing.assert_enqueued(queue="emails", count=1)
            drained = pgq_testing.drain()

            self.assertEqual((len(drained.succeeded), drained.dead), (2, []))
            ran = sorted(Ran.objects.values_list("what", flat=True))
            self.assertEqual(ran, ["print_label", "send_receipt"])
            self.assertTrue(Order.objects.get().receipt_sent)
            pgq_testing.assert_not_enqueued()

    return CheckoutTests


def test_testing_helpers_in_a_django_test_case(db: psycopg.Connection[Any]) -> None:
    import unittest

    suite = unittest.defaultTestLoader.loadTestsFromTestCase(_testing_helpers_case())
    result = unittest.TestResult()
    suite.run(result)

    assert result.errors == [] and result.failures == [], result.errors + result.failures
    assert result.testsRun == 1
    # Django's TestCase rolled its transaction back: no job, no run left.
    assert jobs(db) == [] and ran(db) == []
