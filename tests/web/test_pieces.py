"""The dashboard's pure parts: counts as shown, the throughput samples, the
chart, the filters; and the prefix routing a Django ASGI app would do."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

import pgqueue
from pgqueue.core.dashboard import BadFilter, Count, JobFilter, Throughput, capped
from pgqueue.web import Dashboard
from pgqueue.web.chart import throughput_svg

T0 = datetime(2025, 1, 1, 12, 0, 0)


def test_counts_say_when_they_are_capped_or_estimated() -> None:
    assert str(Count(1234)) == "1,234"
    assert str(capped(10_001, 10_000)) == "10,000+"
    assert str(capped(9_999, 10_000)) == "9,999"
    assert str(Count(2_345_678, estimated=True)) == "≈ 2.3M"


def test_throughput_counts_per_minute_from_counter_samples() -> None:
    t = Throughput(every=timedelta(seconds=5))
    t.add(T0, 1000, 500)
    t.add(T0 + timedelta(seconds=2), 1100, 510)  # too soon: ignored
    t.add(T0 + timedelta(seconds=30), 1300, 700)
    t.add(T0 + timedelta(seconds=70), 1400, 750)
    minutes = t.per_minute()
    assert len(minutes) == 60
    assert minutes[-2:] == [(T0, 300, 200), (T0 + timedelta(minutes=1), 100, 50)]


def test_throughput_skips_a_counter_that_went_back() -> None:
    t = Throughput()
    t.add(T0, 1000, 500)
    t.add(T0 + timedelta(seconds=30), 10, 5)  # statistics reset
    t.add(T0 + timedelta(seconds=60), 30, 25)
    assert [m[1:] for m in t.per_minute() if m[1] or m[2]] == [(20, 20)]


def test_throughput_forgets_samples_older_than_its_window() -> None:
    t = Throughput(minutes=5)
    for i in range(20):
        t.add(T0 + timedelta(minutes=i), i * 10, i * 10)
    assert t.since is not None and t.since >= T0 + timedelta(minutes=13)
    assert len(t.per_minute()) == 5


def test_chart_has_a_bar_per_minute_and_escapes_its_labels() -> None:
    svg = throughput_svg([(T0 + timedelta(minutes=i), i, 2 * i) for i in range(60)])
    assert svg.count('<rect class="bar"') == 60
    assert "<script" not in svg and "polyline" in svg


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"status": "zombie"}, "zombie"),
        ({"payload": "{oops"}, "not valid JSON"),
        ({"payload": "[" * 1500 + "]" * 1500}, "nests deeper than 32"),
        ({"payload": '{"a": NaN}'}, "NaN is not a JSON number"),
        ({"payload": '{"a": 1e999}'}, "out of range"),
        ({"payload": '["' + "x" * 5000 + '"]'}, "longer than 4096"),
        ({"queue": "x" * 300}, "longer than"),
        ({"unique_key": "a\x00b"}, "unique key"),
    ],
)
def test_a_bad_filter_says_what_is_wrong(given: dict[str, str], message: str) -> None:
    with pytest.raises(BadFilter, match=message):
        JobFilter.parse(given)


def test_filters_round_trip_through_the_query_string() -> None:
    where = JobFilter.parse({"status": "dead", "queue": "mail", "payload": '{"a":1}', "kind": ""})
    assert where.as_query() == {"status": "dead", "queue": "mail", "payload": '{"a": 1}'}


def test_mounted_under_a_prefix_by_a_plain_asgi_router(dsn: str, table: str) -> None:
    # What docs/dashboard.md shows for Django's asgi.py: route the prefix by hand.
    with pgqueue.Queue(dsn, table=table) as q:
        q.install()
        job_id = q.enqueue("hello")
        dashboard = Dashboard(q, authorize=lambda request: "read")

        async def other(scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"the app"})

        async def application(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["path"].startswith("/pgqueue/"):
                scope = {**scope, "root_path": scope.get("root_path", "") + "/pgqueue"}
                return await dashboard.asgi(scope, receive, send)
            return await other(scope, receive, send)

        async def drive() -> tuple[str, str]:
            transport = httpx.ASGITransport(app=application)
            async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
                page = await client.get("/pgqueue/jobs")
                rest = await client.get("/orders")
                return page.text, rest.text

        try:
            page, rest = asyncio.run(drive())
        finally:
            dashboard.close()
        assert f'href="/pgqueue/jobs/{job_id}"' in page
        assert rest == "the app"
