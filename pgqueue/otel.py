"""OpenTelemetry tracing for pgqueue, on ``opentelemetry-api`` (the ``otel`` extra).

    import pgqueue.otel

    pgqueue.otel.instrument()        # every queue and worker of this process, from now on

Once instrumented:

* ``enqueue`` makes a span (``enqueue <kind>``, a producer span, a child of
  the span current where it is called) and stores its context on the job,
  as a W3C ``traceparent`` (`pgqueue.Job.trace_context`); ``enqueue_many``
  makes one span for the whole batch (``enqueue_many``), whose context
  every job of the batch stores.
* A worker makes a span for each run of a handler (``run <kind>``, a
  consumer span). On the job's first attempt it is a child of the stored
  context, in the enqueue's trace; on a later attempt it begins a trace of
  its own, linked to the stored context. It is the current span while the
  handler runs, in the handler's task or in its worker thread, so that the
  handler's own spans (its database queries, its HTTP calls) are its
  children.

Spans go to the tracer provider given, or to OpenTelemetry's global one
(``opentelemetry.trace.set_tracer_provider``). Until `instrument` is
called, and after `uninstrument`, pgqueue records nothing and stores no
trace context; importing `pgqueue` never imports OpenTelemetry, only this
module does. See docs/tracing.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
    from opentelemetry.util.types import AttributeValue
except ImportError as exc:  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        "pgqueue.otel needs the opentelemetry-api package: pip install 'pgqueue-jobs[otel]'"
    ) from exc

from . import __version__
from .core import tracing
from .core.jobs import Job

__all__ = ["instrument", "is_instrumented", "uninstrument"]

SYSTEM = "pgqueue"
"""The ``messaging.system`` of pgqueue's spans."""


def instrument(tracer_provider: trace.TracerProvider | None = None) -> None:
    """Trace every queue and worker of this process from now on (see the module).

    ``tracer_provider``: where the spans go; OpenTelemetry's global
    provider when None. Calling it again replaces the provider.
    """
    otel_tracer = trace.get_tracer("pgqueue", __version__, tracer_provider=tracer_provider)
    tracing.tracer = OtelTracer(otel_tracer)


def uninstrument() -> None:
    """Stop tracing: enqueues store no trace context, and no span is made."""
    tracing.tracer = None


def is_instrumented() -> bool:
    """Whether `instrument` is in effect."""
    return isinstance(tracing.tracer, OtelTracer)


def traceparent(span: trace.Span) -> str | None:
    """The W3C ``traceparent`` of ``span`` (version 00); None if its context
    is invalid (no SDK installed, and no valid parent).

    >>> from opentelemetry.trace import NonRecordingSpan, SpanContext
    >>> traceparent(NonRecordingSpan(SpanContext(0xABC, 0x12, is_remote=False, trace_flags=1)))
    '00-00000000000000000000000000000abc-0000000000000012-01'
    """
    context = span.get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


# version-trace_id-parent_id-flags, and what a later version may append.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?\Z")


def stored_context(trace_context: str | None) -> SpanContext | None:
    """The span context a job stored, as a remote one; None if none was
    stored, or if it is not a valid ``traceparent`` (W3C Trace Context).

    Parsed here rather than by OpenTelemetry's propagator, which costs
    several times as much, at every run of a traced job.

    >>> stored_context("00-00000000000000000000000000000abc-0000000000000012-01").span_id
    18
    >>> stored_context("00-00000000000000000000000000000000-0000000000000012-01") is None
    True
    """
    if not trace_context:
        return None
    found = _TRACEPARENT.match(trace_context)
    if found is None:
        return None
    version, trace_hex, span_hex, flags, rest = found.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    context = SpanContext(
        int(trace_hex, 16),
        int(span_hex, 16),
        is_remote=True,
        trace_flags=TraceFlags(int(flags, 16)),
    )
    return context if context.is_valid else None


class OtelTracer:
    """pgqueue's `pgqueue.core.tracing.Tracer`, on an OpenTelemetry tracer."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    def enqueue(self, table: str, kind: str, queue: str) -> tracing.Trace:
        return EnqueueSpan(
            self.tracer,
            f"enqueue {kind}",
            {
                "messaging.system": SYSTEM,
                "messaging.operation.type": "send",
                "messaging.operation.name": "enqueue",
                "messaging.destination.name": queue,
                "pgqueue.table": table,
                "pgqueue.job.kind": kind,
            },
        )

    def enqueue_many(self, table: str, count: int) -> tracing.Trace:
        return EnqueueSpan(
            self.tracer,
            "enqueue_many",
            {
                "messaging.system": SYSTEM,
                "messaging.operation.type": "send",
                "messaging.operation.name": "enqueue_many",
                "messaging.batch.message_count": count,
                "pgqueue.table": table,
            },
        )

    @contextmanager
    def run(self, table: str, job: Job, worker: str | None) -> Iterator[trace.Span]:
        stored = stored_context(job.trace_context)
        links: Sequence[Link] = ()
        if stored is None:
            parent = None  # the context current where the worker runs (usually none)
        elif tracing.first_attempt(job):
            parent = trace.set_span_in_context(trace.NonRecordingSpan(stored))
        else:
            parent = otel_context.Context()  # a trace of its own...
            links = (Link(stored),)  # ...that points at the enqueue
        attributes: dict[str, AttributeValue] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "run",
            "messaging.destination.name": job.queue,
            "messaging.message.id": str(job.id),
            "pgqueue.table": table,
            "pgqueue.job.kind": job.kind,
            "pgqueue.job.attempt": job.attempts,
            "pgqueue.job.max_attempts": job.max_attempts,
        }
        if worker is not None:
            attributes["pgqueue.worker"] = worker
        span = self.tracer.start_span(
            f"run {job.kind}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield span
        except BaseException as exc:
            _failed(span, exc)
            raise
        finally:
            otel_context.detach(token)
            span.end()


class EnqueueSpan(tracing.Trace):
    """The span of one ``enqueue`` or ``enqueue_many``: begun when the queue
    enters it, current until it leaves (so that spans of the database calls,
    if a psycopg instrumentation makes them, are its children)."""

    __slots__ = ("_attributes", "_context", "_name", "_span", "_token", "_tracer")

    def __init__(
        self, tracer: trace.Tracer, name: str, attributes: dict[str, AttributeValue]
    ) -> None:
        self._tracer = tracer
        self._name = name
        self._attributes = attributes
        self._span: trace.Span | None = None
        self._token: object = None
        self._context: str | None = None

    @property
    def context(self) -> str | None:
        return self._context

    def enqueued(self, ids: Sequence[int]) -> None:
        span = self._span
        if span is not None and len(ids) == 1:
            span.set_attribute("messaging.message.id", str(ids[0]))

    def __enter__(self) -> EnqueueSpan:
        span = self._tracer.start_span(
            self._name, kind=SpanKind.PRODUCER, attributes=self._attributes
        )
        context = trace.set_span_in_context(span)
        self._span = span
        self._context = traceparent(span)
        self._token = otel_context.attach(context)
        return self

    def ended(self, exc: BaseException | None) -> None:
        span = self._span
        assert span is not None
        try:
            if exc is not None:
                _failed(span, exc)
        finally:
            otel_context.detach(self._token)  # type: ignore[arg-type]
            span.end()


def _failed(span: trace.Span, exc: BaseException) -> None:
    """Mark a span as failed by ``exc`` (an error, or a cancellation)."""
    if not span.is_recording():
        return
    if isinstance(exc, Exception):
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
    else:
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__} (cancelled)"))
