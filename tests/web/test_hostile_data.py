"""The dashboard under data and input that anyone who may enqueue, or reach its
port, controls: its memory and its pages do not grow with payloads or with
the number of kinds and queues, and every odd request is a 4xx, never a 500.

The memory bound is checked on a dashboard in a process of its own (its peak
resident set, ``VmHWM``), serving ten 20 MB payloads to ten requests at once
and then one payload whole as raw JSON: a generous bound (200 MB; about 50 MB
after the pages and 110 MB after the raw payload here), not a speed measure.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from psycopg import sql

import pgqueue
from pgqueue.core.dashboard import MAX_SHOWN
from pgqueue.web import Dashboard

from ..conftest import Raw
from .conftest import Operator, dead_job

MB = 1 << 20
BIG = 20 * MB
RSS_BOUND = 200 * MB

SERVE = """
import sys
from werkzeug.serving import make_server
from pgqueue.web import Dashboard

dashboard = Dashboard(sys.argv[1], table=sys.argv[2], authorize=lambda request: "admin")
server = make_server("127.0.0.1", 0, dashboard.wsgi, threaded=True)
print(server.server_port, flush=True)
server.serve_forever()
"""


def peak_rss(pid: int) -> int:
    """The process's peak resident set so far, in bytes (``VmHWM``)."""
    with open(f"/proc/{pid}/status") as f:
        found = re.search(r"^VmHWM:\s+(\d+) kB", f.read(), re.M)
    assert found is not None
    return int(found.group(1)) * 1024


@pytest.fixture
def served(queue: pgqueue.Queue, dsn: str, table: str) -> Iterator[tuple[str, int]]:
    """The dashboard in a process of its own: its URL and its pid."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, dsn, table], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    try:
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_ten_20_mb_payloads_leave_the_dashboard_small(
    queue: pgqueue.Queue, served: tuple[str, int]
) -> None:
    url, pid = served
    # Random hex: the server cannot compress it away.
    ids = [queue.enqueue("big", {"blob": os.urandom(BIG // 2).hex()}) for _ in range(10)]
    dead = dead_job(queue, "big_dead", {"blob": os.urandom(BIG // 2).hex()})
    with httpx.Client(timeout=60) as client:
        assert client.get(url + "/jobs").status_code == 200  # warm: templates, pool
        before = peak_rss(pid)
        paths = ["/jobs"] * 6 + ["/", "/dead", f"/jobs/{ids[0]}", f"/jobs/{dead}"]
        with ThreadPoolExecutor(len(paths)) as pool:
            responses = list(pool.map(client.get, [url + p for p in paths]))
        raw = client.get(f"{url}/jobs/{ids[0]}/payload.json")
    after = peak_rss(pid)
    for path, response in zip(paths, responses, strict=True):
        assert response.status_code == 200, (path, response.text[:300])
        assert len(response.content) < MB, path
    page = responses[0].text
    assert all(f">{i}</a>" in page for i in ids)
    assert "a large payload" in page and "MiB" in page  # its stored size
    job_page = responses[8].text
    assert "the whole payload as JSON" in job_page
    # The raw JSON is the whole payload (one at a time, on demand).
    assert raw.status_code == 200 and len(raw.content) > BIG
    assert raw.headers["content-type"] == "application/json"
    assert after < RSS_BOUND, (
        f"peak RSS {after / MB:.0f} MB (before the requests: {before / MB:.0f} MB)"
    )


def test_forty_thousand_kinds_and_queues_keep_every_page_small(
    queue: pgqueue.Queue, operator: Operator, raw: Raw, table: str
) -> None:
    queue.enqueue_many(
        [pgqueue.JobSpec(f"kind_{i}", None, queue=f"queue_{i}") for i in range(40_000)]
    )
    raw.conn.execute(
        sql.SQL(
            "INSERT INTO {} (queue, paused) SELECT 'paused_' || i, true"
            " FROM generate_series(1, 20000) AS i"
        ).format(sql.Identifier(f"{table}_queues"))
    )
    for path in ("/", "/queues"):
        response = operator.get(path)
        assert response.status_code == 200
        assert len(response.data) < MB, (path, len(response.data))
        text = response.get_data(as_text=True)
        assert f"The first {MAX_SHOWN} queues by name" in text
    overview = operator.text("/")
    assert f"The first {MAX_SHOWN} groups by queue and kind" in overview
    assert "kind_0" in overview and "kind_9999" not in overview


def test_a_large_table_s_groups_are_capped_too(
    queue: pgqueue.Queue, operator: Operator, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgqueue.core import dashboard as core

    monkeypatch.setattr(core, "EXACT_ROWS", 10)
    monkeypatch.setattr(core, "MAX_SHOWN", 5)
    for i in range(12):
        dead_job(queue, f"dead_{i:02}", queue=f"q_{i:02}")
    queue.enqueue_many([pgqueue.JobSpec("p", None, queue=f"p_{i:02}") for i in range(12)])
    text = operator.text("/")
    assert "The first 5 groups by queue and kind" in text
    assert "The first 5 queues by name" in text
    assert ">p_04<" in text and ">p_05<" not in text and "dead_11" not in text


def nested(depth: int) -> str:
    """JSON text: arrays ``depth`` deep."""
    return "[" * depth + "]" * depth


# Each (method, path, form): a 4xx, never a 500 or a 503.
ODD: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/jobs?payload=" + quote(nested(1500)), None),
    ("GET", "/jobs?payload=" + quote('{"a": ' + nested(40) + "}"), None),
    ("GET", "/jobs?payload=NaN", None),
    ("GET", "/jobs?payload=" + quote('{"n": 1e999}'), None),
    ("GET", "/jobs?payload=" + quote('{"n": -Infinity}'), None),
    ("GET", "/jobs?payload=" + quote('"' + "x" * 10_000 + '"'), None),
    ("GET", "/jobs/" + quote("²"), None),
    ("GET", "/jobs/" + quote("٣"), None),
    ("GET", "/jobs/0", None),
    ("GET", "/jobs/-1", None),
    ("GET", "/jobs/9223372036854775808", None),
    ("GET", "/jobs/" + "9" * 400, None),
    ("GET", "/jobs/1e3", None),
    ("GET", "/jobs/1/payload.json", None),  # no such job
    ("GET", "/jobs?before=" + quote("²"), None),
    ("GET", "/jobs?before=0", None),
    ("GET", "/jobs?before=99999999999999999999999", None),
    ("GET", "/running?after_at=2025-01-01T00:00:00&after_id=" + quote("²"), None),
    ("GET", "/running?after_at=nonsense&after_id=1", None),
    ("GET", "/" + quote("é"), None),
    ("GET", "/jobs/" + quote("中文"), None),
    ("GET", "/jobs?kind=" + quote("a\r\nSet-Cookie: x=1"), None),
    ("GET", "/jobs" + quote("\r\n"), None),
    ("GET", "/jobs?status=dead%00", None),
    ("POST", "/actions/retry", {"id": "99999999999999999999"}),
    ("POST", "/actions/retry", {"id": "²"}),
    ("POST", "/actions/retry", {"id": "1", "next": "/jobs\r\nLocation: //evil.example/"}),
    ("POST", "/actions/pause-queue", {"queue": "a\nforged log line"}),
    ("POST", "/actions/pause-queue", {"queue": "a\x85b"}),
    ("POST", "/actions/pause-queue", {"queue": "x" * 300}),
    ("POST", "/actions/pause-schedule", {"schedule": "a\x1bb"}),
    ("POST", "/actions/set-limit", {"key": "k", "max_running": "NaN"}),
    ("POST", "/actions/set-limit", {"key": "k", "max_running": "1e999"}),
    ("POST", "/actions/every-dead", {"action": "explode"}),
    ("POST", "/actions/every-dead", {"action": "purge", "payload": nested(2000)}),
]


@pytest.mark.parametrize(("method", "path", "form"), ODD, ids=[f"{m} {p[:60]}" for m, p, _ in ODD])
def test_odd_input_is_a_4xx(
    queue: pgqueue.Queue, operator: Operator, method: str, path: str, form: dict[str, Any] | None
) -> None:
    operator.get("/dead")  # a page's CSRF token, for the posts
    response = operator.get(path) if method == "GET" else operator.post(path, form or {})
    assert 400 <= response.status_code < 500, (response.status_code, response.data[:300])


@pytest.mark.parametrize("csrf", ["é", "\u2603" * 64, "\x00"])
def test_a_non_ascii_csrf_token_is_refused(operator: Operator, csrf: str) -> None:
    operator.get("/dead")
    response = operator.client.post(
        "/actions/retry",
        data={"csrf": csrf, "id": "1"},
        headers={"Origin": "http://localhost"},
    )
    assert response.status_code in (400, 403)  # a control character, or a wrong token


@pytest.mark.parametrize(
    "target",
    [
        "//evil.example/",
        "///evil.example/",
        "/\\evil.example/",
        "https://evil.example/",
        "javascript:alert(1)",
        "/jobs?x=\u4e2d",  # not latin-1: it could not be a header
    ],
)
def test_a_redirect_never_leaves_the_dashboard(
    queue: pgqueue.Queue, operator: Operator, target: str
) -> None:
    job_id = dead_job(queue)
    operator.get("/dead")
    response = operator.post("/actions/retry", {"id": str(job_id), "next": target})
    assert response.status_code == 303
    location = response.headers["location"]
    assert location.startswith("/") and not location.startswith(("//", "/\\"))
    assert "evil" not in location


@pytest.mark.parametrize("target", ["javascript:alert(1)", "//evil.example/", "/dead"])
def test_the_bulk_confirm_page_s_cancel_link_stays_on_the_dashboard(
    queue: pgqueue.Queue, operator: Operator, target: str
) -> None:
    dead_job(queue)
    operator.get("/dead")
    response = operator.post("/actions/every-dead", {"action": "purge", "next": target})
    assert response.status_code == 200
    [cancel] = re.findall(r'<a href="([^"]*)">Cancel</a>', response.get_data(as_text=True))
    assert cancel == "/dead"


def test_whole_payloads_are_sent_one_at_a_time(
    queue: pgqueue.Queue, dashboard: Dashboard, operator: Operator
) -> None:
    job_id = queue.enqueue("k", {"a": 1})
    dashboard.raw_wait = 0.01
    with dashboard._raw:  # another whole payload on its way
        busy = operator.get(f"/jobs/{job_id}/payload.json")
    assert busy.status_code == 503 and b"one at a time" in busy.data
    sent = operator.get(f"/jobs/{job_id}/payload.json")
    assert sent.status_code == 200 and sent.json == {"a": 1}
