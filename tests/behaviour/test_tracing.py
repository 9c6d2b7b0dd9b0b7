"""OpenTelemetry tracing (docs/tracing.md), with the SDK's in-memory exporter, on each backend."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, Tracer

import pgqueue
import pgqueue.otel
from pgqueue import JobSpec

from ..backends import WorkerUnderTest
from ..conftest import Raw

pytestmark = pytest.mark.anyio


@dataclass
class Traces:
    """A tracer provider whose spans are kept in memory, and the application's tracer."""

    provider: TracerProvider
    exporter: InMemorySpanExporter

    @property
    def app(self) -> Tracer:
        return self.provider.get_tracer("app")

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        [span] = self.named(name)
        return span

    def names(self) -> list[str]:
        return sorted(s.name for s in self.exporter.get_finished_spans())


def in_memory() -> Traces:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Traces(provider, exporter)


@pytest.fixture
def traces() -> Iterator[Traces]:
    """pgqueue instrumented, its spans (and the application's) kept in memory."""
    kept = in_memory()
    pgqueue.otel.instrument(kept.provider)
    try:
        yield kept
    finally:
        pgqueue.otel.uninstrument()


def traceparent(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def span_id(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.span_id


def trace_id(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.trace_id


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


async def test_a_jobs_first_run_is_a_child_of_the_span_that_enqueued_it(
    queue: Any, backend: str, traces: Traces
) -> None:
    with traces.app.start_as_current_span("request"):
        job_id = await queue.enqueue("mail", {"n": 1}, queue="emails")
    seen: list[str | None] = []

    def handle(job: pgqueue.Job) -> None:
        seen.append(job.trace_context)

    await WorkerUnderTest(backend, queue, {"mail": handle}).run(until_empty=True)

    request, enqueue, run = (traces.one(n) for n in ("request", "enqueue mail", "run mail"))
    # request -> enqueue -> run, one trace.
    assert parent_id(enqueue) == span_id(request)
    assert parent_id(run) == span_id(enqueue)
    assert trace_id(run) == trace_id(request)
    assert run.links == ()
    assert (enqueue.kind, run.kind) == (SpanKind.PRODUCER, SpanKind.CONSUMER)
    # The job carried the enqueue span's context, as a W3C traceparent.
    assert seen == [traceparent(enqueue)]
    assert enqueue.attributes is not None and run.attributes is not None
    assert enqueue.attributes["messaging.message.id"] == str(job_id)
    assert enqueue.attributes["messaging.destination.name"] == "emails"
    assert run.attributes["messaging.message.id"] == str(job_id)
    assert run.attributes["pgqueue.job.attempt"] == 1
    assert run.status.status_code is StatusCode.UNSET


async def test_a_retrys_run_is_linked_to_the_enqueue_not_its_child(
    queue: Any, backend: str, raw: Raw, traces: Traces
) -> None:
    with traces.app.start_as_current_span("request"):
        job_id = await queue.enqueue("flaky")

    def handle(job: pgqueue.Job) -> None:
        if job.attempts == 1:
            raise RuntimeError("the first attempt fails")

    await WorkerUnderTest(backend, queue, {"flaky": handle}).run(until_empty=True)
    raw.rows("UPDATE {table} SET run_at = now() WHERE id = %s", job_id)  # no backoff wait
    await WorkerUnderTest(backend, queue, {"flaky": handle}).run(until_empty=True)
    assert await queue.get(job_id) is None  # the retry succeeded

    enqueue = traces.one("enqueue flaky")
    first, retry = sorted(
        traces.named("run flaky"),
        key=lambda s: int(s.attributes["pgqueue.job.attempt"]) if s.attributes else 0,  # type: ignore[arg-type]
    )
    # The first attempt: a child of the enqueue, failed with its error.
    assert parent_id(first) == span_id(enqueue)
    assert first.links == ()
    assert first.status.status_code is StatusCode.ERROR
    assert [e.name for e in first.events] == ["exception"]
    # The retry: a trace of its own, linked to the enqueue.
    assert retry.parent is None
    assert trace_id(retry) != trace_id(enqueue)
    [link] = retry.links
    assert (link.context.trace_id, link.context.span_id) == (trace_id(enqueue), span_id(enqueue))
    assert retry.status.status_code is StatusCode.UNSET


@pytest.mark.parametrize("size", [3, 250], ids=["insert", "copy"])
async def test_enqueue_many_makes_one_span_whose_context_every_job_stores(
    queue: Any, backend: str, raw: Raw, traces: Traces, size: int
) -> None:
    specs: list[Any] = [("bulk", {"n": n}) for n in range(size)]
    specs.append(JobSpec("bulk", unique_key="once"))  # written on its own, same span
    with traces.app.start_as_current_span("request"):
        ids = await queue.enqueue_many(specs)

    assert traces.names() == ["enqueue_many", "request"]
    batch = traces.one("enqueue_many")
    assert parent_id(batch) == span_id(traces.one("request"))
    assert batch.attributes is not None
    assert batch.attributes["messaging.batch.message_count"] == size + 1
    stored = raw.rows("SELECT DISTINCT trace_context FROM {table} WHERE id = ANY(%s)", ids)
    assert stored == [(traceparent(batch),)]

    await WorkerUnderTest(backend, queue, {"bulk": lambda job: None}).run(until_empty=True)
    runs = traces.named("run bulk")
    assert len(runs) == size + 1
    assert {parent_id(r) for r in runs} == {span_id(batch)}


@pytest.mark.parametrize("job_timeout", [None, 60.0], ids=["no_timeout", "job_timeout"])
async def test_a_handlers_own_spans_are_children_of_its_run_span(
    queue: Any, backend: str, traces: Traces, job_timeout: float | None
) -> None:
    app = traces.app

    def plain(job: pgqueue.Job) -> None:  # in a worker thread
        with app.start_as_current_span("plain's query"):
            pass

    async def coroutine(job: pgqueue.Job) -> None:  # in its runner task
        await anyio.lowlevel.checkpoint()
        with app.start_as_current_span("coroutine's call"):
            await anyio.lowlevel.checkpoint()

    handlers: dict[str, Any] = {"plain": plain}
    if backend != "sync":  # the sync Worker takes plain functions only
        handlers["coroutine"] = coroutine
    await queue.enqueue_many([(kind, None) for kind in handlers for _ in range(3)])

    worker = WorkerUnderTest(backend, queue, handlers, concurrency=2, job_timeout=job_timeout)
    await worker.run(until_empty=True)

    for kind, inner in (("plain", "plain's query"), ("coroutine", "coroutine's call")):
        if kind not in handlers:
            continue
        runs = {span_id(r): r for r in traces.named(f"run {kind}")}
        nested = traces.named(inner)
        assert len(runs) == len(nested) == 3
        # Each handler's span has its own run's span for parent.
        assert {parent_id(n) for n in nested} == set(runs)


async def test_replacing_a_waiting_unique_job_gives_it_the_replacing_enqueues_context(
    queue: Any, traces: Traces
) -> None:
    with traces.app.start_as_current_span("first"):
        job_id = await queue.enqueue("sync", {"v": 1}, unique_key="acct", on_duplicate="replace")
    with traces.app.start_as_current_span("second"):
        again = await queue.enqueue("sync", {"v": 2}, unique_key="acct", on_duplicate="replace")
    assert again == job_id
    job = await queue.get(job_id)
    assert job is not None and job.payload == {"v": 2}
    [_, second] = sorted(traces.named("enqueue sync"), key=lambda s: s.start_time or 0)
    assert job.trace_context == traceparent(second)


async def test_a_job_whose_stored_context_is_not_a_traceparent_runs_in_a_trace_of_its_own(
    queue: Any, backend: str, raw: Raw, traces: Traces
) -> None:
    job_id = await queue.enqueue("odd")
    raw.rows("UPDATE {table} SET trace_context = 'not a traceparent' WHERE id = %s", job_id)
    ran: list[int] = []
    await WorkerUnderTest(backend, queue, {"odd": lambda job: ran.append(job.id)}).run(
        until_empty=True
    )
    assert ran == [job_id]
    run = traces.one("run odd")
    assert run.parent is None and run.links == ()


async def test_nothing_is_recorded_or_stored_when_pgqueue_is_not_instrumented(
    queue: Any, backend: str, raw: Raw
) -> None:
    kept = in_memory()
    pgqueue.otel.instrument(kept.provider)
    pgqueue.otel.uninstrument()  # instrumented once, then no more
    assert not pgqueue.otel.is_instrumented()

    with kept.app.start_as_current_span("request"):
        await queue.enqueue("quiet")
        await queue.enqueue_many([("quiet", n) for n in range(3)])
    assert raw.count("trace_context IS NOT NULL") == 0

    def handle(job: pgqueue.Job) -> None:
        assert job.trace_context is None

    await WorkerUnderTest(backend, queue, {"quiet": handle}).run(until_empty=True)
    assert raw.count() == 0  # every job ran, and succeeded
    assert kept.names() == ["request"]
