"""pgqueue's web dashboard mounted in a FastAPI app, under /pgqueue.

    pip install 'pgqueue-jobs[web]' fastapi uvicorn
    export PGQUEUE_DSN=$(pgqueue embedded start) DASHBOARD_TOKEN=change-me
    uvicorn examples.dashboard_fastapi:app

Requests to /pgqueue/... need ``Authorization: Bearer $DASHBOARD_TOKEN`` (admin)
or ``$DASHBOARD_READ_TOKEN`` (read-only); a real app would look at its own
session instead. ``python examples/dashboard_fastapi.py --demo`` mounts it,
fails a job and retries it from the dashboard through the app, with httpx.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import os
import re
from collections.abc import AsyncIterator

from fastapi import FastAPI

import pgqueue
from pgqueue.embedded import local_dsn
from pgqueue.web import ADMIN, READ, Dashboard, Request

# Unset, the local server that `pgqueue embedded start` keeps (started if need be).
DSN = os.environ.get("PGQUEUE_DSN") or local_dsn()
TABLE = os.environ.get("PGQUEUE_TABLE", "pgqueue_jobs")


def authorize(request: Request) -> str | None:
    """Admin with $DASHBOARD_TOKEN, read-only with $DASHBOARD_READ_TOKEN, else refused."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        return None
    for role, variable in ((ADMIN, "DASHBOARD_TOKEN"), (READ, "DASHBOARD_READ_TOKEN")):
        expected = os.environ.get(variable)
        if expected and hmac.compare_digest(token.encode(), expected.encode()):
            request.user = role
            return role
    return None


def create_app(dsn: str = DSN, table: str = TABLE) -> FastAPI:
    dashboard = Dashboard(dsn, table=table, authorize=authorize)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        dashboard.close()

    app = FastAPI(lifespan=lifespan)

    @app.get("/")
    def home() -> dict[str, str]:
        return {"dashboard": "/pgqueue/"}

    app.mount("/pgqueue", dashboard.asgi)
    return app


async def demo() -> None:
    import httpx

    os.environ.setdefault("DASHBOARD_TOKEN", "demo-token")
    with pgqueue.Queue(DSN, table=TABLE) as q:
        q.install()
        job_id = q.enqueue("charge", {"order": 7}, max_attempts=1)
        [job] = q.claim(1, worker="demo", kinds=["charge"])
        q.fail(job, "card declined")
        app = create_app()
        headers = {"authorization": f"Bearer {os.environ['DASHBOARD_TOKEN']}"}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://shop.test", headers=headers
        ) as client:
            page = await client.get("/pgqueue/dead")
            print(f"GET /pgqueue/dead: {page.status_code}, job {job_id} listed:",
                  f'href="/pgqueue/jobs/{job_id}"' in page.text)  # fmt: skip
            token = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
            assert token is not None
            retried = await client.post(
                "/pgqueue/actions/retry",
                data={"csrf": token.group(1), "id": str(job_id), "next": "/pgqueue/dead"},
                headers={"origin": "http://shop.test"},
            )
            where = retried.headers["location"]
            print(f"POST /pgqueue/actions/retry: {retried.status_code} -> {where}")
            refused = await client.get("/pgqueue/", headers={"authorization": "Bearer wrong"})
            print(f"GET /pgqueue/ with a wrong token: {refused.status_code}")
        after = q.get(job_id)
        print(f"job {job_id} is now {after.status if after else 'gone'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--demo", action="store_true", help="mount it and click through it")
    if parser.parse_args().demo:
        asyncio.run(demo())
    else:
        parser.print_help()
else:
    app = create_app()
