"""What Django's task API costs on pgqueue, beside plain pgqueue jobs in the same project.

Django is configured in this process (``settings.configure``) on the
server's database, with ``pgqueue.contrib.django`` and two
``PgQueueBackend`` backends: one keeping results for a day (the default),
one keeping none. For each of three cases, ``--jobs`` jobs are enqueued one
per call in autocommit (the way a view outside ``atomic()`` does it, on
Django's own connection: a commit each), and drained; then as many in one
``transaction.atomic()`` block (the cost of the call itself), and drained
again, timed. The drains are by the worker ``manage.py pgqueue_worker``
builds (``build_worker``, ``--concurrency`` threads, ``until_empty``):

* ``plain job``: ``pgq.enqueue("noop", {"n": i})``, run by a ``@handler``;
* ``task, no result``: ``noop_task.using(backend="noresult").enqueue(i)``;
* ``task, result``: ``noop_task.enqueue(i)``, its result kept (``RESULT_TTL``).

Rates are jobs per second of wall time, the best of ``--repeat`` rounds
(the cases take turns within a round). With no ``--dsn`` (or
``PGQUEUE_DSN``) an embedded PostgreSQL is started and removed afterwards;
the job tables are always dropped.

    python benchmarks/django_drain.py
    python benchmarks/django_drain.py --jobs 5000 --repeat 3 --json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from pgqueue.embedded import dsn_or_embedded

TABLE = f"djangobench_{uuid.uuid4().hex[:8]}"


def configure(dsn: str) -> None:
    import django
    from django.conf import settings

    db = conninfo_to_dict(dsn)
    apps = ["pgqueue.contrib.django"]
    if importlib.util.find_spec("django.tasks") is None:
        apps.insert(0, "django_tasks")
    backend = "pgqueue.contrib.django.backend.PgQueueBackend"
    settings.configure(
        USE_TZ=True,
        INSTALLED_APPS=apps,
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": db.get("dbname", "postgres"),
                "USER": db.get("user", ""),
                "PASSWORD": db.get("password", ""),
                "HOST": db.get("host", ""),
                "PORT": db.get("port", ""),
            }
        },
        PGQUEUE={"TABLE": TABLE},
        TASKS={
            "default": {"BACKEND": backend},
            "noresult": {"BACKEND": backend, "OPTIONS": {"RESULT_TTL": None}},
        },
    )
    django.setup()


def noop(n: int) -> int:
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("PGQUEUE_DSN"))
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per case and round")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the best is kept")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    with dsn_or_embedded(args.dsn) as dsn:
        configure(dsn)
        try:
            results = run(args)
        finally:
            from pgqueue.contrib import django as pgq

            pgq.get_queue().uninstall()
            pgq.close_queue()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.jobs:,} jobs per case, best of {args.repeat}, concurrency {args.concurrency}")
    print(f"{'case':<18} {'enqueue/s, autocommit':>22} {'in one atomic()':>16} {'drain/s':>8}")
    for case, (each, atomic, drain) in results.items():
        print(f"{case:<18} {each:>22,.0f} {atomic:>16,.0f} {drain:>8,.0f}")


def run(args: argparse.Namespace) -> dict[str, tuple[float, float, float]]:
    from django.db import transaction

    from pgqueue.contrib import django as pgq
    from pgqueue.contrib.django.tasks_api import Task
    from pgqueue.contrib.django.worker import build_worker

    try:
        from django.tasks import task
    except ImportError:
        from django_tasks import task

    # A module-level task, as @task leaves it: the worker imports it by its path (__main__.noop).
    globals()["noop"] = noop_task = task(noop)
    assert isinstance(noop_task, Task)
    pgq.handler("noop")(lambda job: job.payload["n"])
    pgq.get_queue().install()

    cases: dict[str, Callable[[int], Any]] = {
        "plain job": lambda i: pgq.enqueue("noop", {"n": i}),
        "task, no result": lambda i: noop_task.using(backend="noresult").enqueue(i),
        "task, result": lambda i: noop_task.enqueue(i),
    }
    best: dict[str, list[float]] = {c: [0.0, 0.0, 0.0] for c in cases}
    for _ in range(args.repeat):
        for case, enqueue in cases.items():
            rates = []
            for atomic in (False, True):
                started = time.perf_counter()
                with transaction.atomic() if atomic else nullcontext():
                    for i in range(args.jobs):
                        enqueue(i)
                enqueued = time.perf_counter()
                rates.append(args.jobs / (enqueued - started))
                worker = build_worker(concurrency=args.concurrency, handle_signals=False)
                worker.run(until_empty=True)
                if atomic:  # the drain of the second batch is the one measured
                    rates.append(args.jobs / (time.perf_counter() - enqueued))
            best[case] = [max(b, r) for b, r in zip(best[case], rates, strict=True)]
    return {case: (a, b, c) for case, (a, b, c) in best.items()}


if __name__ == "__main__":
    main()
