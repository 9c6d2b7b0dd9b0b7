"""``pgqueue worker --health-port``: liveness and readiness probes, from a real worker process.

The windows a probe judges by (`pgqueue.core.health`) are pinned by
`assess` below, with times given; the processes show each probe's answer
in the states a real worker reaches without waiting for a window to pass:
running against a database (ready), and unable to reach one (not ready
yet, but live).
"""

from __future__ import annotations

import json
import signal
import socket
import urllib.error
import urllib.request
from typing import Any

import pytest

from pgqueue.core.health import LIVE_WITHIN, READY_WITHIN, Stamps, assess

from .test_cli import FLAVOURS, PATIENCE, UNREACHABLE_DSN, App, app, free_port, run_command

__all__ = ["app"]  # fixtures, used by name


def probe(port: int, path: str) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of ``GET path``; (0, {}) while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=PATIENCE) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    except OSError:
        return 0, {}


def answers(port: int, path: str, status: int) -> bool:
    return probe(port, path)[0] == status


@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_health_probes_say_live_and_ready_once_the_worker_reaches_the_database(
    app: App, flavour: str
) -> None:
    port = free_port()
    with app.worker(*FLAVOURS[flavour], "--health-port", str(port)) as proc:
        app.wait_until(lambda: answers(port, "/readyz", 200), "/readyz to say ready", proc)
        status, body = probe(port, "/livez")
        assert status == 200, body
        assert body == {"live": True, "ready": True, "why_not_live": None, "why_not_ready": None}
        proc.send_signal(signal.SIGTERM)
        assert app.exit_code(proc) == 0, app.output()
    assert f"serving health probes (/livez, /readyz) on port {port}" in app.output()


def test_readyz_is_503_with_the_reason_while_the_database_cannot_be_reached(app: App) -> None:
    port = free_port()
    args = ["--health-port", str(port), "--dsn", UNREACHABLE_DSN]
    with app.worker(*FLAVOURS["sync"], *args) as proc:
        app.wait_until(lambda: answers(port, "/readyz", 503), "/readyz to answer 503", proc)
        status, body = probe(port, "/readyz")
        assert status == 503
        assert body["ready"] is False
        assert body["why_not_ready"] == "has not reached the database yet"
        # Its loop turns: a restart would not help, so the liveness probe passes.
        assert body["live"] is True
        assert probe(port, "/livez")[0] == 200
        proc.send_signal(signal.SIGTERM)
        assert app.exit_code(proc) == 0, app.output()


def test_health_and_metrics_share_a_port_when_given_the_same(app: App) -> None:
    port = free_port()
    args = ["--health-port", str(port), "--metrics-port", str(port)]
    with app.worker(*FLAVOURS["asyncio"], *args) as proc:
        app.wait_until(lambda: answers(port, "/readyz", 200), "/readyz to say ready", proc)
        url = f"http://127.0.0.1:{port}/metrics"
        with urllib.request.urlopen(url, timeout=PATIENCE) as response:
            assert f'pgqueue_queue_up{{table="{app.table}"}} 1.0' in response.read().decode()
        proc.send_signal(signal.SIGTERM)
        assert app.exit_code(proc) == 0, app.output()
    assert f"health probes (/livez, /readyz) and Prometheus metrics (/metrics) on port {port}" in (
        app.output()
    )


def test_an_unknown_path_on_the_health_port_is_404(app: App) -> None:
    port = free_port()
    with app.worker(*FLAVOURS["sync"], "--health-port", str(port)) as proc:
        app.wait_until(lambda: answers(port, "/livez", 200), "/livez to answer", proc)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=PATIENCE)
        assert refused.value.code == 404
        proc.send_signal(signal.SIGTERM)
        assert app.exit_code(proc) == 0, app.output()


def test_under_processes_the_probes_speak_for_every_child(app: App) -> None:
    port = free_port()
    with app.worker(*FLAVOURS["sync"], "--processes", "2", "--health-port", str(port)) as proc:
        app.wait_until(lambda: answers(port, "/readyz", 200), "both children ready", proc)
        assert probe(port, "/livez")[0] == 200
        proc.send_signal(signal.SIGTERM)
        assert app.exit_code(proc) == 0, app.output()


def test_under_processes_readyz_names_each_child_that_cannot_reach_the_database(
    app: App,
) -> None:
    port = free_port()
    args = ["--processes", "2", "--health-port", str(port), "--dsn", UNREACHABLE_DSN]
    with app.worker(*FLAVOURS["sync"], *args) as proc:

        def both_named() -> bool:
            status, body = probe(port, "/readyz")
            reason = body.get("why_not_ready") or ""
            return status == 503 and "worker 1: " in reason and "worker 2: " in reason

        app.wait_until(both_named, "/readyz to name both children", proc)
        assert probe(port, "/livez")[0] == 200
        proc.send_signal(signal.SIGTERM)
        assert app.exit_code(proc) == 0, app.output()


def test_health_port_in_use_exits_1_with_a_message(app: App) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_command(app, "worker", "tests.cli_app:worker", "--health-port", str(port))
    assert done.returncode == 1, done.stderr
    assert f"cannot serve health probes on port {port}" in done.stderr
    assert "Traceback" not in done.stderr


# -- the judgement, with times given ----------------------------------------------


def stamps(started: float, turned: float, reached: float) -> Stamps:
    s = Stamps()
    s.started_at, s.turned_at, s.reached_at = started, turned, reached
    return s


def test_a_worker_whose_loop_turned_and_that_reached_the_database_recently_is_both() -> None:
    report = assess([stamps(0.0, 100.0, 100.0)], now=100.0 + min(LIVE_WITHIN, READY_WITHIN))
    assert (report.live, report.ready) == (True, True)


def test_a_loop_that_stopped_turning_is_neither_live_nor_ready() -> None:
    report = assess([stamps(0.0, 100.0, 100.0 + LIVE_WITHIN)], now=100.0 + LIVE_WITHIN + 1)
    assert (report.live, report.ready) == (False, False)
    assert "its event loop has not turned for" in report.why_not_live


def test_no_database_call_returned_recently_is_live_but_not_ready() -> None:
    report = assess([stamps(0.0, 200.0, 100.0)], now=100.0 + READY_WITHIN + 1)
    assert (report.live, report.ready) == (True, False)
    assert report.why_not_ready == f"has not reached the database for {READY_WITHIN + 1:.0f}s"


def test_a_worker_not_started_is_live_for_a_while_then_not() -> None:
    assert assess([stamps(100.0, 0.0, 0.0)], now=100.0 + LIVE_WITHIN).live
    late = assess([stamps(100.0, 0.0, 0.0)], now=100.0 + LIVE_WITHIN + 1)
    assert not late.live
    assert "not running" in late.why_not_live


def test_a_child_being_restarted_is_live_but_not_ready() -> None:
    report = assess([stamps(0.0, 10.0, 10.0), None], now=10.0)
    assert (report.live, report.ready) == (True, False)
    assert report.why_not_ready == "worker 2: not running (being restarted)"
