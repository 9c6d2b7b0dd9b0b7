"""Take the screenshots of the web dashboard in docs/img/ (and the README).

    pip install -e '.[browser]' && python tools/dashboard_screenshots.py [--minutes 4]

Starts an embedded PostgreSQL (or uses $PGQUEUE_DSN), fills a queue table
with jobs of a few queues and kinds, dead jobs with their errors, running
jobs and a schedule, runs a worker and an enqueuer for a few minutes while
a browser keeps the overview open (so the throughput chart has real
minutes to show), then saves the main pages as PNG files. Needs Debian's
chromium (``/usr/bin/chromium``, or $PGQUEUE_TEST_CHROMIUM).
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time
from datetime import timedelta
from pathlib import Path

from playwright.sync_api import sync_playwright
from werkzeug.serving import make_server

import pgqueue
from pgqueue.core.schedules import validate_schedule
from pgqueue.embedded import dsn_or_embedded
from pgqueue.web import Dashboard

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "img"
CHROMIUM = os.environ.get("PGQUEUE_TEST_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
TABLE = "shop_jobs"


def fill(q: pgqueue.Queue) -> None:
    q.install()
    rng = random.Random(7)
    kinds = {"mail": ["send_receipt", "send_digest"], "images": ["resize", "thumbnail"],
             "billing": ["charge_card", "refund"]}  # fmt: skip
    for queue, names in kinds.items():
        q.enqueue_many(
            [pgqueue.JobSpec(rng.choice(names), {"order": rng.randint(1, 9999)}, queue=queue,
                             delay=timedelta(hours=1)) for _ in range(300)]
        )  # fmt: skip
    errors = [
        'Traceback (most recent call last):\n  File "shop/billing.py", line 88, in charge_card\n'
        "    gateway.charge(order.total)\n"
        "payments.CardDeclined: card declined (insufficient funds)",
        "TimeoutError: the image service did not answer within 30 s",
    ]
    for i in range(12):
        kind = "charge_card" if i % 3 else "resize"
        queue = "billing" if kind == "charge_card" else "images"
        payload = {"order": 4000 + i, "note": "<script>alert(1)</script>"}
        job_id = q.enqueue(kind, payload, queue=queue, max_attempts=1)
        [job] = q.claim(1, worker="shop-worker-2:311", kinds=[kind])
        assert job.id == job_id
        q.fail(job, errors[0] if kind == "charge_card" else errors[1])
    for kind in ("resize", "send_digest"):
        q.enqueue(kind, {"order": 1}, queue="images" if kind == "resize" else "mail")
        q.claim(1, worker="shop-worker-1:207", kinds=[kind])
    q.set_limit("payment-gateway", 4)
    q.enqueue("charge_card", {"order": 77}, queue="billing", limit_key="payment-gateway")
    q.register_schedules([
        validate_schedule("send_digest", cron="0 8 * * MON-FRI", tz="Europe/Berlin", queue="mail"),
        validate_schedule("prune_carts", every=timedelta(minutes=15)),
    ])  # fmt: skip
    q.pause_queue("images")


def workload(dsn: str, stop: threading.Event) -> None:
    """Jobs in and out at a varying pace, for the throughput chart."""
    with pgqueue.Queue(dsn, table=TABLE) as q:
        n = 0
        while not stop.is_set():
            n += 1
            burst = 40 + int(30 * abs(((n // 20) % 6) - 3))
            q.enqueue_many([("ping", {"n": i}) for i in range(burst)])
            jobs = q.claim(burst - 5, worker="shop-worker-1:207", kinds=["ping"])
            q.complete(*jobs)
            stop.wait(1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=4.0, help="workload before the shots")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    with dsn_or_embedded(os.environ.get("PGQUEUE_DSN")) as dsn:
        with pgqueue.Queue(dsn, table=TABLE) as q:
            q.uninstall()
            fill(q)
        dashboard = Dashboard(dsn, table=TABLE, authorize=lambda r: "admin", refresh=5)
        dashboard._throughput.every = timedelta(seconds=2)
        server = make_server("127.0.0.1", 0, dashboard.wsgi, threaded=True)
        url = f"http://127.0.0.1:{server.server_port}"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        stop = threading.Event()
        worker = threading.Thread(target=workload, args=(dsn, stop))
        worker.start()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(url + "/")
            time.sleep(args.minutes * 60)  # the overview refreshes itself meanwhile
            stop.set()
            worker.join()
            with pgqueue.Queue(dsn, table=TABLE) as q:
                dead = q.jobs(status="dead", kinds=["charge_card"], limit=1)[0].id
            for name, path in [("overview", "/"), ("dead", "/dead"), ("job", f"/jobs/{dead}"),
                               ("running", "/running"), ("queues", "/queues"),
                               ("schedules", "/schedules")]:  # fmt: skip
                page.goto(url + path)
                page.screenshot(path=str(OUT / f"dashboard-{name}.png"), full_page=True)
                print(f"docs/img/dashboard-{name}.png")
            browser.close()
        server.shutdown()
        dashboard.close()


if __name__ == "__main__":
    main()
