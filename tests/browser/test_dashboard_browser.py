"""The dashboard in Chromium: every page loads, buttons change the database,
pages refresh themselves, and a script in a payload stays text."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

import pgqueue

from ..conftest import Raw
from ..web.conftest import dead_job
from .conftest import Served

PAGES = {
    "/": "Throughput",
    "/jobs": "Jobs",
    "/dead": "Dead jobs",
    "/running": "Running jobs",
    "/queues": "Queues",
    "/schedules": "Schedules",
    "/limits": "Concurrency limits",
}


def test_every_page_loads_with_htmx_and_no_error(
    queue: pgqueue.Queue, served: Served, page: Page
) -> None:
    job_id = queue.enqueue("hello", {"n": 1})
    for path, heading in PAGES.items():
        page.goto(served.url + path)
        expect(page.get_by_text(heading).first).to_be_visible()
        assert page.evaluate("typeof window.htmx") == "object"
    page.goto(f"{served.url}/jobs/{job_id}")
    expect(page.get_by_role("heading", name=f"Job {job_id}")).to_be_visible()


def test_retry_a_dead_job_by_clicking(queue: pgqueue.Queue, served: Served, page: Page) -> None:
    job_id = dead_job(queue, "charge")
    page.goto(served.url + "/dead")
    page.get_by_label(f"select job {job_id}").check()
    page.get_by_role("button", name="Retry selected").click()
    expect(page.get_by_role("status")).to_have_text("1 job(s) retried.")
    job = queue.get(job_id)
    assert job is not None and job.status == "pending"


def test_purge_every_matching_dead_job_after_confirming(
    queue: pgqueue.Queue, served: Served, page: Page, raw: Raw
) -> None:
    for _ in range(3):
        dead_job(queue, "charge", queue="billing")
    kept = dead_job(queue, "charge", queue="mail")
    page.goto(served.url + "/dead?queue=billing")
    page.get_by_role("button", name="Purge all matching…").click()
    expect(page.get_by_text("Dead jobs matching now: 3.")).to_be_visible()
    page.get_by_role("button", name="Yes, purge them").click()
    expect(page.get_by_role("status")).to_have_text("3 job(s) purged.")
    assert raw.rows("SELECT id FROM {table}") == [(kept,)]


def test_cancel_a_running_job_by_clicking(
    queue: pgqueue.Queue, served: Served, page: Page, raw: Raw
) -> None:
    job_id = queue.enqueue("long")
    queue.claim(1, worker="host-1")
    page.goto(served.url + "/running")
    expect(page.get_by_text("host-1")).to_be_visible()
    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("status")).to_have_text("1 job(s) cancelled or asked to stop.")
    assert raw.one("SELECT cancel_requested_at IS NOT NULL FROM {table} WHERE id = %s", job_id)


def test_pause_a_queue_by_clicking(queue: pgqueue.Queue, served: Served, page: Page) -> None:
    queue.enqueue("resize", queue="images")
    page.goto(served.url + "/queues")
    page.get_by_role("button", name="Pause").click()
    expect(page.get_by_role("status")).to_have_text("Queue paused.")
    assert [q.paused for q in queue.queues() if q.name == "images"] == [True]
    expect(page.get_by_role("button", name="Resume")).to_be_visible()


def test_script_in_a_payload_and_an_error_is_shown_as_text(
    queue: pgqueue.Queue, served: Served, page: Page
) -> None:
    attack = "<script>window.pwned = 1</script><img src=x onerror='window.pwned = 2'>"
    job_id = queue.enqueue("evil", {"name": attack}, max_attempts=1)
    [job] = queue.claim(1, worker="w")
    queue.fail(job, attack)
    for path in ("/dead", f"/jobs/{job_id}"):
        page.goto(served.url + path)
        expect(page.get_by_text("<script>window.pwned = 1</script>").first).to_be_visible()
        assert page.evaluate("window.pwned") is None


def test_a_page_refreshes_itself_without_a_reload(
    queue: pgqueue.Queue, served: Served, page: Page
) -> None:
    page.goto(served.url + "/jobs")
    page.evaluate("window.sameDocument = true")
    job_id = queue.enqueue("arrived_later")
    expect(page.get_by_role("link", name=str(job_id), exact=True)).to_be_visible()
    assert page.evaluate("window.sameDocument") is True


def test_a_hidden_tab_refreshes_as_soon_as_it_is_visible_again(
    queue: pgqueue.Queue, served: Served, page: Page
) -> None:
    page.goto(served.url + "/jobs")
    # The tab goes to the background: its refresh timer stops.
    page.evaluate(
        "Object.defineProperty(document, 'hidden', {value: true, configurable: true});"
        "document.dispatchEvent(new Event('visibilitychange'));"
    )
    job_id = queue.enqueue("while_hidden")
    swapped: list[str] = []
    page.on("request", lambda request: swapped.append(request.url))
    # Back to the foreground: it refreshes at once.
    page.evaluate(
        "Object.defineProperty(document, 'hidden', {value: false, configurable: true});"
        "document.dispatchEvent(new Event('visibilitychange'));"
    )
    expect(page.get_by_role("link", name=str(job_id), exact=True)).to_be_visible()
    assert any(re.search(r"/jobs$", url) for url in swapped)
