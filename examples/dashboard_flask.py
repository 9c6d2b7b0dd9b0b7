"""pgqueue's web dashboard mounted in a Flask app, under /pgqueue (WSGI).

    pip install 'pgqueue-jobs[web]' flask
    export PGQUEUE_DSN=$(pgqueue embedded start) DASHBOARD_USER=ops DASHBOARD_PASSWORD=change-me
    flask --app examples/dashboard_flask.py run

The dashboard is WSGI middleware in front of the Flask app: requests under
/pgqueue go to it, the rest to Flask. Its ``authorize`` hook asks for HTTP
basic auth here (a real app would look at its own session). ``python
examples/dashboard_flask.py --demo`` mounts it, pauses a queue from the
dashboard and prints what the database says, with Flask's test client.
"""

from __future__ import annotations

import argparse
import base64
import hmac
import os
import re

from flask import Flask
from werkzeug.middleware.dispatcher import DispatcherMiddleware

import pgqueue
from pgqueue.embedded import local_dsn
from pgqueue.web import ADMIN, Dashboard, Request

# Unset, the local server that `pgqueue embedded start` keeps (started if need be).
DSN = os.environ.get("PGQUEUE_DSN") or local_dsn()
TABLE = os.environ.get("PGQUEUE_TABLE", "pgqueue_jobs")


def authorize(request: Request) -> str | None:
    """Admin for $DASHBOARD_USER with $DASHBOARD_PASSWORD (HTTP basic auth), else refused."""
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, _, password = base64.b64decode(credentials).decode().partition(":")
    except ValueError:
        return None
    want_user = os.environ.get("DASHBOARD_USER", "")
    want_password = os.environ.get("DASHBOARD_PASSWORD", "")
    if not want_password:
        return None
    ok = hmac.compare_digest(user.encode(), want_user.encode())
    if hmac.compare_digest(password.encode(), want_password.encode()) and ok:
        request.user = user
        return ADMIN
    return None


def create_app(dsn: str = DSN, table: str = TABLE) -> Flask:
    app = Flask(__name__)
    dashboard = Dashboard(
        dsn, table=table, authorize=authorize, login_challenge='Basic realm="pgqueue"'
    )

    @app.get("/")
    def home() -> dict[str, str]:
        return {"dashboard": "/pgqueue/"}

    app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {"/pgqueue": dashboard.wsgi})  # type: ignore[method-assign]
    app.extensions["pgqueue_dashboard"] = dashboard
    return app


def demo() -> None:
    os.environ.setdefault("DASHBOARD_USER", "ops")
    os.environ.setdefault("DASHBOARD_PASSWORD", "demo-password")
    with pgqueue.Queue(DSN, table=TABLE) as q:
        q.install()
        q.enqueue("resize", {"image": 7}, queue="images")
        app = create_app()
        login = f"{os.environ['DASHBOARD_USER']}:{os.environ['DASHBOARD_PASSWORD']}"
        auth = {"authorization": "Basic " + base64.b64encode(login.encode()).decode()}
        client = app.test_client()
        print(f"GET /pgqueue/ without a login: {client.get('/pgqueue/').status_code}")
        page = client.get("/pgqueue/queues", headers=auth)
        text = page.get_data(as_text=True)
        print(f"GET /pgqueue/queues: {page.status_code}, queue images listed: {'images' in text}")
        token = re.search(r'name="csrf" value="([0-9a-f]+)"', text)
        assert token is not None
        paused = client.post(
            "/pgqueue/actions/pause-queue",
            data={"csrf": token.group(1), "queue": "images", "next": "/pgqueue/queues"},
            headers={**auth, "origin": "http://localhost"},
        )
        where = paused.headers["location"]
        print(f"POST /pgqueue/actions/pause-queue: {paused.status_code} -> {where}")
        states = {s.name: s.paused for s in q.queues()}
        print(f"queue images paused: {states['images']}")
        app.extensions["pgqueue_dashboard"].close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--demo", action="store_true", help="mount it and click through it")
    if parser.parse_args().demo:
        demo()
    else:
        parser.print_help()
else:
    app = create_app()
