"""Tracing costs nothing until it is turned on: no OpenTelemetry import, no hook called.

The spans themselves are tested on every backend in tests/behaviour/test_tracing.py.
"""

from __future__ import annotations

import doctest
import subprocess
import sys
import textwrap

from pgqueue.core import tracing


def run_python(code: str, dsn: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), dsn],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_queue_and_a_worker_import_no_opentelemetry_until_pgqueue_otel_is(
    dsn: str, table: str
) -> None:
    done = run_python(
        f"""
        import sys

        import pgqueue

        with pgqueue.Queue(sys.argv[1], table={table!r}) as q:
            q.install()
            q.enqueue("k", 1)
            q.enqueue_many([("k", 2), ("k", 3)])
            ran = []
            worker = pgqueue.Worker(q, {{"k": lambda job: ran.append(job.trace_context)}},
                                    handle_signals=False)
            worker.run(until_empty=True)
        assert ran == [None, None, None], ran
        loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
        print(loaded)
        import pgqueue.otel
        print("opentelemetry" in sys.modules)
        """,
        dsn,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "True"]


def test_pgqueue_otel_without_opentelemetry_says_which_extra_to_install() -> None:
    done = run_python(
        """
        import sys

        sys.modules["opentelemetry"] = None  # as if it were not installed
        import pgqueue
        try:
            import pgqueue.otel
        except ImportError as exc:
            print(exc)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'pgqueue-jobs[otel]'" in done.stdout


def test_no_tracer_is_set_until_instrument_and_none_after_uninstrument() -> None:
    import pgqueue.otel

    assert tracing.tracer is None
    assert tracing.enqueue_trace("t", "k", "default") is tracing.NO_TRACE
    pgqueue.otel.instrument()
    try:
        assert pgqueue.otel.is_instrumented()
        assert tracing.enqueue_trace("t", "k", "default") is not tracing.NO_TRACE
    finally:
        pgqueue.otel.uninstrument()
    assert tracing.tracer is None
    assert tracing.enqueue_many_trace("t", 3) is tracing.NO_TRACE


def test_tracing_doctests() -> None:
    import pgqueue.otel

    for module in (tracing, pgqueue.otel):
        assert doctest.testmod(module, raise_on_error=True).attempted > 0


def test_a_stored_traceparent_is_read_as_w3c_trace_context_says() -> None:
    from pgqueue.otel import stored_context

    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    context = stored_context(f"00-{trace_id}-{span_id}-01")
    assert context is not None and context.is_remote
    assert (context.trace_id, context.span_id) == (int(trace_id, 16), int(span_id, 16))
    assert context.trace_flags.sampled
    unsampled = stored_context(f"00-{trace_id}-{span_id}-00")
    assert unsampled is not None and not unsampled.trace_flags.sampled
    # A later version may append fields; version 00 may not.
    assert stored_context(f"01-{trace_id}-{span_id}-01-more") is not None
    for refused in (
        None,
        "",
        f"00-{trace_id}-{span_id}-01-more",
        f"ff-{trace_id}-{span_id}-01",
        f"00-{'0' * 32}-{span_id}-01",
        f"00-{trace_id}-{'0' * 16}-01",
        f"00-{trace_id.upper()}-{span_id}-01",
        f"00-{trace_id}-{span_id}",
        "not a traceparent",
    ):
        assert stored_context(refused) is None, refused
