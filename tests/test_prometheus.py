"""The ``prometheus`` extra: event counters and run times, and gauges read from real rows."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import pgqueue
from pgqueue.prometheus import PrometheusMetrics, QueueStatsCollector

from .conftest import Raw


@pytest.fixture
def queue(dsn: str, table: str) -> Iterator[pgqueue.Queue]:
    backoff = pgqueue.Backoff(base=timedelta(0), jitter=0)
    with pgqueue.Queue(dsn, table=table, backoff=backoff) as q:
        q.install()
        yield q


def broken(job: pgqueue.Job) -> None:
    raise ValueError("card declined")


def test_metrics_count_every_event_and_observe_run_times_of_a_drain(
    queue: pgqueue.Queue, table: str
) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry)
    queue.enqueue_many([("ok", i) for i in range(5)])
    queue.enqueue("bad", max_attempts=2)
    worker = pgqueue.Worker(queue, {"ok": lambda job: None, "bad": broken},
                            on_event=metrics, handle_signals=False)  # fmt: skip
    worker.run(until_empty=True)

    def jobs(kind: str, event: str) -> float | None:
        labels = {"table": table, "queue": "default", "kind": kind, "event": event}
        return registry.get_sample_value("pgqueue_jobs_total", labels)

    assert (jobs("ok", "claimed"), jobs("ok", "succeeded"), jobs("ok", "failed")) == (5, 5, None)
    assert (jobs("bad", "claimed"), jobs("bad", "failed"), jobs("bad", "dead")) == (2, 1, 1)
    assert jobs("bad", "succeeded") is None

    def runs(kind: str, sample: str) -> float | None:
        labels = {"table": table, "queue": "default", "kind": kind}
        return registry.get_sample_value(f"pgqueue_job_duration_seconds_{sample}", labels)

    assert (runs("ok", "count"), runs("bad", "count")) == (5, 2)
    ok_sum = runs("ok", "sum")
    assert ok_sum is not None and ok_sum >= 0
    infinite = {"table": table, "queue": "default", "kind": "ok", "le": "+Inf"}
    assert registry.get_sample_value("pgqueue_job_duration_seconds_bucket", infinite) == 5


def test_metrics_count_the_events_of_each_queue_apart(queue: pgqueue.Queue, table: str) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry)
    queue.enqueue_many([pgqueue.JobSpec("ok", i, queue="mail", priority=5) for i in range(3)])
    queue.enqueue_many([("ok", i) for i in range(2)])
    worker = pgqueue.Worker(queue, {"ok": lambda job: None}, on_event=metrics,
                            handle_signals=False)  # fmt: skip
    worker.run(until_empty=True)

    def succeeded(name: str) -> float | None:
        labels = {"table": table, "queue": name, "kind": "ok", "event": "succeeded"}
        return registry.get_sample_value("pgqueue_jobs_total", labels)

    def runs(name: str) -> float | None:
        labels = {"table": table, "queue": name, "kind": "ok"}
        return registry.get_sample_value("pgqueue_job_duration_seconds_count", labels)

    assert (succeeded("mail"), succeeded("default")) == (3, 2)
    assert (runs("mail"), runs("default")) == (3, 2)
    # Priority is no label of the event metrics.
    names = {s.name: s.labels for m in registry.collect() for s in m.samples}
    assert "priority" not in names["pgqueue_jobs_total"]


def test_metrics_namespace_prefixes_every_name_and_one_registry_refuses_a_twin() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry, namespace="shop")
    event = pgqueue.JobEvent(pgqueue.EventName.REAPED, 7, None, "w1", "pgqueue_jobs")
    metrics(event)
    metrics(event)
    labels = {"table": "pgqueue_jobs", "queue": "", "kind": "", "event": "reaped"}
    assert registry.get_sample_value("shop_jobs_total", labels) == 2
    with pytest.raises(ValueError, match="Duplicated"):
        PrometheusMetrics(registry=registry, namespace="shop")


def test_stats_collector_reports_real_rows_by_status_and_kind(
    queue: pgqueue.Queue, raw: Raw, table: str
) -> None:
    queue.enqueue_many([("mail", i) for i in range(3)])
    queue.enqueue("mail", delay=timedelta(hours=1))  # pending, not ready
    queue.enqueue("bill", max_attempts=1)
    queue.enqueue("report")
    [bill] = queue.claim(1, worker="w1", kinds=["bill"])
    assert queue.fail(bill, "no money") is pgqueue.JobStatus.DEAD
    [report] = queue.claim(1, worker="gone", kinds=["report"])
    raw.rows("UPDATE {table} SET locked_at = now() - interval '1 hour' WHERE id = %s", report.id)
    raw.rows("UPDATE {table} SET run_at = now() - interval '1 hour' WHERE run_at <= now()")

    registry = CollectorRegistry()
    QueueStatsCollector(queue, registry=registry)

    def gauge(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(f"pgqueue_queue_{name}", {"table": table, **labels})

    assert gauge("up") == 1
    by_status = {s: gauge("jobs", status=s) for s in ("pending", "running", "dead")}
    assert by_status == {"pending": 4, "running": 1, "dead": 1}
    assert gauge("kind_jobs", kind="mail", status="pending") == 4
    assert gauge("kind_jobs", kind="bill", status="dead") == 1
    assert gauge("kind_jobs", kind="report", status="running") == 1
    assert gauge("kind_jobs", kind="mail", status="dead") == 0
    age = gauge("oldest_pending_age_seconds")
    assert age is not None and age >= 3600
    assert gauge("expired_jobs") == 1
    # The same numbers in the text a scrape returns.
    text = generate_latest(registry).decode()
    lines = text.splitlines()
    [pending] = [x for x in lines if x.startswith("pgqueue_queue_jobs{") and "pending" in x]
    assert f'table="{table}"' in pending and pending.endswith(" 4.0")


def test_stats_collector_reports_rows_by_queue_and_by_priority(
    queue: pgqueue.Queue, table: str
) -> None:
    queue.enqueue_many([pgqueue.JobSpec("mail", i, queue="mail", priority=10) for i in range(3)])
    queue.enqueue("report", priority=-5)
    queue.enqueue("bill", max_attempts=1, queue="billing")
    [bill] = queue.claim(1, worker="w1", queues=["billing"])
    assert queue.fail(bill, "no money") is pgqueue.JobStatus.DEAD
    queue.claim(1, worker="w1", queues=["mail"])

    registry = CollectorRegistry()
    QueueStatsCollector(queue, registry=registry)

    def gauge(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(f"pgqueue_queue_{name}", {"table": table, **labels})

    def by_queue(name: str) -> dict[str, float | None]:
        statuses = ("pending", "running", "dead", "waiting")
        return {s: gauge("jobs_by_queue", queue=name, status=s) for s in statuses}

    assert by_queue("mail") == {"pending": 2, "running": 1, "dead": 0, "waiting": 0}
    assert by_queue("default") == {"pending": 1, "running": 0, "dead": 0, "waiting": 0}
    assert by_queue("billing") == {"pending": 0, "running": 0, "dead": 1, "waiting": 0}
    assert by_queue("nothing") == {"pending": None, "running": None, "dead": None, "waiting": None}
    assert gauge("jobs_by_priority", priority="10", status="pending") == 2
    assert gauge("jobs_by_priority", priority="10", status="running") == 1
    assert gauge("jobs_by_priority", priority="0", status="dead") == 1
    assert gauge("jobs_by_priority", priority="-5", status="pending") == 1
    # The totals by status are what they were: the same rows, counted once.
    assert gauge("jobs", status="pending") == 3


def test_stats_collector_reads_the_rows_again_at_every_scrape(
    queue: pgqueue.Queue, table: str
) -> None:
    registry = CollectorRegistry()
    QueueStatsCollector(queue, registry=registry)
    labels = {"table": table, "status": "pending"}
    assert registry.get_sample_value("pgqueue_queue_jobs", labels) == 0
    assert (
        registry.get_sample_value("pgqueue_queue_oldest_pending_age_seconds", {"table": table}) == 0
    )
    queue.enqueue("mail")
    assert registry.get_sample_value("pgqueue_queue_jobs", labels) == 1


def test_stats_collector_reports_down_and_logs_when_the_table_cannot_be_read(
    dsn: str, table: str, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    with (
        pgqueue.Queue(dsn, table=table) as never_installed,
        caplog.at_level(logging.WARNING, logger="pgqueue.prometheus"),
    ):
        # Registration names the metrics without reading the database.
        QueueStatsCollector(never_installed, registry=registry)
        assert caplog.records == []
        text = generate_latest(registry).decode()
    assert f'pgqueue_queue_up{{table="{table}"}} 0.0' in text
    [record] = caplog.records
    assert record.levelno == logging.WARNING and table in record.getMessage()


def test_stats_collector_refuses_an_async_queue_and_a_table_given_twice(
    dsn: str, queue: pgqueue.Queue
) -> None:
    with pytest.raises(TypeError, match="needs pgqueue"):
        QueueStatsCollector(pgqueue.AsyncQueue(dsn), registry=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="same table twice"):
        QueueStatsCollector(queue, queue, registry=None)
    with pytest.raises(ValueError, match="visibility_timeout"):
        QueueStatsCollector(queue, registry=None, visibility_timeout=timedelta(0))


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_importing_pgqueue_does_not_import_prometheus_client() -> None:
    done = run_python("import sys, pgqueue; print('prometheus_client' in sys.modules)")
    assert (done.returncode, done.stdout.strip()) == (0, "False"), done.stderr


def test_pgqueue_prometheus_without_prometheus_client_says_how_to_install_it() -> None:
    done = run_python(
        "import sys\n"
        "sys.modules['prometheus_client'] = None  # as if it were not installed\n"
        "import pgqueue.prometheus\n"
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: pgqueue.prometheus needs the prometheus_client package")
    assert "pip install 'pgqueue-jobs[prometheus]'" in last
