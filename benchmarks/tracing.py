"""What OpenTelemetry tracing costs: enqueue_many and a draining worker, off and on.

Each run enqueues ``--jobs`` trivial jobs into a fresh table with one
``enqueue_many`` (COPY) and drains them with an `AsyncWorker` (``async
def`` handler that returns at once) or, with ``--backend sync``, a
`Worker` (plain handler), ``until_empty``. It reports the enqueue's time
and the drain's jobs per second. Three variants take turns within each
repeat, so that noise on the machine is shared fairly:

* ``off``: pgqueue not instrumented (what every user without the extra
  gets): no trace context stored, no span made;
* ``no-sdk``: `pgqueue.otel.instrument()` with OpenTelemetry's API alone
  (no SDK installed or configured): spans are made but record nothing, and
  no trace context is stored (there is none to store);
* ``sdk``: instrumented with the SDK's ``TracerProvider`` and a
  ``BatchSpanProcessor`` whose exporter drops what it is given, the
  ``enqueue_many`` inside an application span: every job stores the
  batch's context, and every run makes a span parented on it.

The median of ``--repeat`` runs is printed per variant, with its ratio to
``off``. Needs the ``otel`` extra and ``opentelemetry-sdk`` (the ``test``
extra has both).

With no ``--dsn`` (or ``PGQUEUE_DSN``) an embedded PostgreSQL with default
settings is started and removed afterwards; tables are always dropped.

    python benchmarks/tracing.py
    python benchmarks/tracing.py --jobs 50000 --repeat 5 --backend sync
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterator, Sequence

import anyio
import psycopg
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import pgqueue
import pgqueue.otel
from pgqueue.core.ops import QueueCore
from pgqueue.embedded import dsn_or_embedded
from pgqueue.sync.driver import run_on

VARIANTS = ("off", "no-sdk", "sdk")


class Dropped(SpanExporter):
    """Counts the spans it is given, and sends them nowhere."""

    def __init__(self) -> None:
        self.count = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.count += len(spans)
        return SpanExportResult.SUCCESS


@contextlib.contextmanager
def variant(name: str) -> Iterator[trace.Tracer | None]:
    """Instrument pgqueue as ``name`` says; yield the application's tracer (sdk only)."""
    if name == "off":
        yield None
        return
    provider: trace.TracerProvider | None = None
    if name == "sdk":
        sdk = TracerProvider()
        exported = Dropped()
        sdk.add_span_processor(BatchSpanProcessor(exported))
        provider = sdk
    else:
        provider = trace.NoOpTracerProvider()
    pgqueue.otel.instrument(provider)
    try:
        yield provider.get_tracer("bench") if name == "sdk" else None
    finally:
        pgqueue.otel.uninstrument()
        if isinstance(provider, TracerProvider):
            provider.shutdown()


def drain(dsn: str, jobs: int, backend: str, name: str) -> tuple[float, float]:
    """Enqueue ``jobs`` jobs and drain them: the enqueue's seconds, the drain's jobs/s."""
    table = f"tracebench_{uuid.uuid4().hex[:10]}"
    specs = [("noop", {"n": i}) for i in range(jobs)]
    try:
        with variant(name) as app:
            request = app.start_as_current_span("request") if app else contextlib.nullcontext()
            if backend == "sync":
                with pgqueue.Queue(dsn, table=table) as q:
                    q.install()
                    start = time.perf_counter()
                    with request:
                        q.enqueue_many(specs)
                    enqueued = time.perf_counter() - start
                    worker = pgqueue.Worker(q, {"noop": lambda job: None}, handle_signals=False)
                    start = time.perf_counter()
                    worker.run(until_empty=True)
                    return enqueued, jobs / (time.perf_counter() - start)

            async def main() -> tuple[float, float]:
                async with pgqueue.AsyncQueue(dsn, table=table) as q:
                    await q.install()
                    start = time.perf_counter()
                    with request:
                        await q.enqueue_many(specs)
                    enqueued = time.perf_counter() - start

                    async def noop(job: pgqueue.Job) -> None:
                        pass

                    worker = pgqueue.AsyncWorker(q, {"noop": noop}, handle_signals=False)
                    start = time.perf_counter()
                    await worker.run(until_empty=True)
                    return enqueued, jobs / (time.perf_counter() - start)

            return anyio.run(main, backend=backend)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            run_on(conn, QueueCore(table).uninstall())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--dsn", default=os.environ.get("PGQUEUE_DSN"), help="default: $PGQUEUE_DSN, else embedded"
    )
    p.add_argument("--jobs", type=int, default=20_000, help="jobs per run (default 20,000)")
    p.add_argument("--repeat", type=int, default=3, help="runs per variant (default 3)")
    p.add_argument("--backend", choices=("asyncio", "trio", "sync"), default="asyncio")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    with dsn_or_embedded(args.dsn) as dsn:
        for i in range(args.repeat):
            for name in VARIANTS:
                print(f"run {i + 1}/{args.repeat}: {name}...", file=sys.stderr)
                runs[name].append(drain(dsn, args.jobs, args.backend, name))
    if args.json:
        print(json.dumps({"backend": args.backend, "jobs": args.jobs, "runs": runs}))
        return 0
    enqueue = {name: statistics.median(e for e, _ in r) for name, r in runs.items()}
    rate = {name: statistics.median(d for _, d in r) for name, r in runs.items()}
    print(f"{args.jobs:,} trivial jobs on {args.backend}, median of {args.repeat} run(s)")
    print(f"{'tracing':8} {'enqueue_many s':>14} {'drain jobs/s':>13} {'vs off':>7}")
    for name in VARIANTS:
        print(
            f"{name:8} {enqueue[name]:14.3f} {rate[name]:13,.0f} {rate[name] / rate['off']:6.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
