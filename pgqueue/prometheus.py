"""Prometheus metrics for pgqueue, with ``prometheus_client`` (the ``prometheus`` extra).

Two pieces, used together or apart:

    from prometheus_client import start_http_server
    from pgqueue.prometheus import PrometheusMetrics, QueueStatsCollector

    metrics = PrometheusMetrics()                 # what workers did: counters, run times
    worker = pgqueue.Worker(queue, handlers, on_event=metrics)
    QueueStatsCollector(queue)                    # what the table holds, read at scrape time
    start_http_server(9100)
    worker.run()

`PrometheusMetrics` is an event listener (see `pgqueue.JobEvent`) that counts
every event and observes handler run times. `QueueStatsCollector` reads
`Queue.stats` whenever Prometheus scrapes, whichever process did the work:
its gauges are exact on a table of fewer than 50,000 rows, and past that
each status is counted through its index up to a cap and estimated beyond
(``<namespace>_queue_jobs_estimated`` says which), so that a scrape never
reads the whole table.

Install with ``pip install 'pgqueue-jobs[prometheus]'``. Importing `pgqueue`
never imports ``prometheus_client``; only this module does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        "pgqueue.prometheus needs the prometheus_client package: "
        "pip install 'pgqueue-jobs[prometheus]'"
    ) from exc

import psycopg

from .core.events import JobEvent
from .core.jobs import ROW_STATUSES, JobStatus
from .sync.queue import Queue

__all__ = ["DEFAULT_BUCKETS", "PrometheusMetrics", "QueueStatsCollector"]

log = logging.getLogger("pgqueue.prometheus")

DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
"""Run-time buckets, in seconds: from a few milliseconds to ten minutes."""


class PrometheusMetrics:
    """An event listener that turns a worker's job events into Prometheus metrics.

    * ``<namespace>_jobs_total{table, queue, kind, event}``: a counter of
      events, by the queue's table, the job's queue and kind, and the event's
      name (``claimed``, ``succeeded``, ``failed``, ``dead``, ``released``,
      ``interrupted``, ``reaped``, ``cancelled``). ``queue`` and ``kind`` are
      empty for reaped jobs and jobs the reaper buried or cancelled.
    * ``<namespace>_job_duration_seconds{table, queue, kind}``: a histogram of
      handler run times, from the events that carry one (``succeeded``,
      ``failed``, ``dead``).

    Priority is no label: it would multiply every series by the priorities
    in use (up to 201) for a question the gauges of `QueueStatsCollector`
    answer better (what is waiting, at which priority); `JobEvent.priority`
    is there for a listener of your own.

    For example:

        metrics = PrometheusMetrics()
        worker = pgqueue.Worker(queue, handlers, on_event=metrics)
        # or: worker.add_event_listener(metrics)

    One instance serves every worker of a process, on any queue: the metrics
    are registered in ``registry`` (the global ``REGISTRY`` by default; None
    registers nothing) when it is created, and a registry refuses the same
    names twice. ``namespace`` prefixes every name.
    """

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = REGISTRY,
        namespace: str = "pgqueue",
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> None:
        self.jobs = Counter(
            "jobs",
            "Jobs by what happened to them, as reported by pgqueue workers.",
            ["table", "queue", "kind", "event"],
            namespace=namespace,
            registry=registry,
        )
        self.duration = Histogram(
            "job_duration_seconds",
            "How long pgqueue job handlers ran, in seconds.",
            ["table", "queue", "kind"],
            namespace=namespace,
            registry=registry,
            buckets=buckets,
        )
        # Labelled children by label values: `labels()` costs more than a dict lookup.
        self._counts: dict[tuple[str, str, str, str], Any] = {}
        self._times: dict[tuple[str, str, str], Any] = {}

    def __call__(self, event: JobEvent) -> None:
        """Count ``event``, and observe its run time if it has one."""
        kind = event.kind or ""
        queue = event.queue or ""
        key = (event.table, queue, kind, event.name.value)
        count = self._counts.get(key)
        if count is None:
            count = self._counts[key] = self.jobs.labels(*key)
        count.inc()
        if event.duration is not None:
            where = (event.table, queue, kind)
            times = self._times.get(where)
            if times is None:
                times = self._times[where] = self.duration.labels(*where)
            times.observe(event.duration)


class QueueStatsCollector(Collector):
    """Gauges read from `Queue.stats` each time Prometheus scrapes.

    * ``<namespace>_queue_jobs{table, status}``: rows by status (``pending``
      counts delayed jobs too);
    * ``<namespace>_queue_kind_jobs{table, kind, status}``: the same, by kind
      (only kinds that have rows);
    * ``<namespace>_queue_jobs_by_queue{table, queue, status}``: the same, by
      the jobs' queue (only queues that have rows);
    * ``<namespace>_queue_jobs_by_priority{table, priority, status}``: the
      same, by priority (only priorities that have rows);
    * ``<namespace>_queue_oldest_pending_age_seconds{table}``: how long the
      oldest ready job has waited (0 when none is ready);
    * ``<namespace>_queue_expired_jobs{table}``: running jobs whose lease is
      older than ``visibility_timeout``, which a reaper will take back;
    * ``<namespace>_queue_jobs_estimated{table, status}``: 1 if that status's
      count is an estimate (a large table: see `pgqueue.Stats.estimated`;
      its counts by kind, queue and priority are then lower bounds), else 0;
    * ``<namespace>_queue_up{table}``: 1 if the stats could be read, else 0
      (the error is logged at WARNING on ``pgqueue.prometheus``).

    For example:

        QueueStatsCollector(queue)                   # registered in REGISTRY
        QueueStatsCollector(orders, mail, registry=my_registry)

    Give every queue to watch to one collector: two collectors with the same
    ``namespace`` in one registry would export the same names. Each scrape
    runs a few short statements on each table on the queue's pool (see
    `pgqueue.core.queue.counts`): none of them reads the whole table. Only a
    sync `pgqueue.Queue` will do (scrapes are synchronous); an async
    application can open one on the same DSN for this.
    """

    def __init__(
        self,
        queue: Queue,
        *more_queues: Queue,
        registry: CollectorRegistry | None = REGISTRY,
        namespace: str = "pgqueue",
        visibility_timeout: timedelta | None = None,
    ) -> None:
        queues = [queue, *more_queues]
        for q in queues:
            if not isinstance(q, Queue):
                raise TypeError(
                    f"QueueStatsCollector needs pgqueue.Queue objects, not {type(q).__name__} "
                    "(an AsyncQueue cannot be read from a scrape; open a Queue on its DSN)"
                )
        tables = [q.table for q in queues]
        if len(set(tables)) != len(tables):
            raise ValueError(f"QueueStatsCollector was given the same table twice: {tables}")
        if visibility_timeout is not None:
            # Refused now rather than at every scrape.
            queues[0].core.stats(visibility_timeout)
        self.queues = queues
        self.namespace = namespace
        self.visibility_timeout = visibility_timeout
        if registry is not None:
            registry.register(self)

    def _families(self) -> dict[str, GaugeMetricFamily]:
        ns = self.namespace
        return {
            "jobs": GaugeMetricFamily(
                f"{ns}_queue_jobs",
                "Jobs in the queue's table, by status.",
                labels=["table", "status"],
            ),
            "kind_jobs": GaugeMetricFamily(
                f"{ns}_queue_kind_jobs",
                "Jobs in the queue's table, by kind and status.",
                labels=["table", "kind", "status"],
            ),
            "queue_jobs": GaugeMetricFamily(
                f"{ns}_queue_jobs_by_queue",
                "Jobs in the queue's table, by the queue they wait in and status.",
                labels=["table", "queue", "status"],
            ),
            "priority_jobs": GaugeMetricFamily(
                f"{ns}_queue_jobs_by_priority",
                "Jobs in the queue's table, by priority and status.",
                labels=["table", "priority", "status"],
            ),
            "oldest": GaugeMetricFamily(
                f"{ns}_queue_oldest_pending_age_seconds",
                "How long the oldest ready job has waited, in seconds (0 when none is ready).",
                labels=["table"],
            ),
            "expired": GaugeMetricFamily(
                f"{ns}_queue_expired_jobs",
                "Running jobs whose lease has expired: a reaper will return them to pending.",
                labels=["table"],
            ),
            "estimated": GaugeMetricFamily(
                f"{ns}_queue_jobs_estimated",
                "1 if the count of jobs of this status is an estimate (a large table), else 0.",
                labels=["table", "status"],
            ),
            "up": GaugeMetricFamily(
                f"{ns}_queue_up",
                "1 if the queue's stats could be read at this scrape, else 0.",
                labels=["table"],
            ),
        }

    def describe(self) -> Iterable[GaugeMetricFamily]:
        """The metrics' names, without reading the database (for registration)."""
        return self._families().values()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Read every queue's stats now and yield the gauges."""
        families = self._families()
        for queue in self.queues:
            table = queue.table
            try:
                stats = queue.stats(self.visibility_timeout)
            except psycopg.Error as exc:
                log.warning("stats of queue %s could not be read for Prometheus: %s", table, exc)
                families["up"].add_metric([table], 0.0)
                continue
            families["up"].add_metric([table], 1.0)
            for status in ROW_STATUSES:
                families["jobs"].add_metric([table, status.value], stats.by_status[status])
                estimated = 1.0 if status in stats.estimated else 0.0
                families["estimated"].add_metric([table, status.value], estimated)
            breakdowns: tuple[tuple[str, Mapping[Any, Mapping[JobStatus, int]]], ...] = (
                ("kind_jobs", stats.by_kind),
                ("queue_jobs", stats.by_queue),
                ("priority_jobs", stats.by_priority),
            )
            for family, breakdown in breakdowns:
                for key, counts in breakdown.items():
                    for status, count in counts.items():
                        families[family].add_metric([table, str(key), status.value], count)
            age = stats.oldest_pending_age
            families["oldest"].add_metric([table], age.total_seconds() if age is not None else 0.0)
            families["expired"].add_metric([table], stats.expired)
        yield from families.values()
