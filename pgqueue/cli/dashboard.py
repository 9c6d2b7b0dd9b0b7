"""``pgqueue dashboard``: the web dashboard on its own server (uvicorn), bound to 127.0.0.1."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import secrets
import sys
from typing import Any

from .argtypes import port
from .errors import UsageError

__all__ = ["add_dashboard_command", "run_dashboard"]

log = logging.getLogger("pgqueue.web")


def add_dashboard_command(commands: Any) -> None:
    """Add ``pgqueue dashboard`` to the subcommands."""
    parser = commands.add_parser(
        "dashboard",
        help="serve the web dashboard (needs the web extra)",
        description=(
            "Serve the web dashboard of a queue table. Without --dsn (or $PGQUEUE_DSN) it "
            "starts an embedded PostgreSQL and installs the table there. Without --token or "
            "--basic-auth it makes up a token and prints the URL that logs in with it."
        ),
    )
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGQUEUE_DSN") or None,
        help="the database (default: $PGQUEUE_DSN; none: an embedded server)",
    )
    parser.add_argument(
        "--table",
        default=os.environ.get("PGQUEUE_TABLE") or "pgqueue_jobs",
        help="the queue table (default: $PGQUEUE_TABLE, else pgqueue_jobs)",
    )
    parser.add_argument(
        "--history", action="store_true", help="the queue keeps history (purges copy there)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface (default: 127.0.0.1)")
    parser.add_argument("--port", type=port, default=8787, help="port (default: 8787)")
    parser.add_argument(
        "--token",
        default=os.environ.get("PGQUEUE_DASHBOARD_TOKEN") or None,
        help="the login token (default: $PGQUEUE_DASHBOARD_TOKEN, else a random one); "
        "give it as ?token= once, or as 'Authorization: Bearer TOKEN'",
    )
    parser.add_argument(
        "--basic-auth",
        metavar="USER:PASSWORD",
        default=os.environ.get("PGQUEUE_DASHBOARD_BASIC_AUTH") or None,
        help="log in with HTTP basic auth instead (default: $PGQUEUE_DASHBOARD_BASIC_AUTH)",
    )
    parser.add_argument("--read-only", action="store_true", help="show everything, allow no action")
    parser.add_argument(
        "--refresh",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="pages refresh this often while visible (default: 2; 0: never)",
    )
    parser.set_defaults(run=run_dashboard, subparser=parser)


def run_dashboard(args: argparse.Namespace) -> int:
    """``pgqueue dashboard``."""
    for module in ("jinja2", "uvicorn"):
        if importlib.util.find_spec(module) is None:
            raise UsageError(f"the dashboard needs {module}: pip install 'pgqueue[web]'")
    basic = None
    if args.basic_auth:
        user, sep, password = args.basic_auth.partition(":")
        if not sep or not user or not password:
            raise UsageError("--basic-auth must be USER:PASSWORD, both non-empty")
        basic = (user, password)
    if args.refresh < 0:
        raise UsageError("--refresh must be 0 or more seconds")
    token = args.token if args.token or basic else secrets.token_urlsafe(24)

    import uvicorn

    from .. import Queue
    from ..embedded import dsn_or_embedded
    from ..web import Dashboard
    from ..web.http import asgi_app
    from ..web.standalone import login, token_authorize

    # The dashboard's actions at INFO; the embedded server's chatter, not.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    log.setLevel(logging.INFO)
    with dsn_or_embedded(args.dsn) as dsn:
        if not args.dsn:
            with Queue(dsn, table=args.table) as q:
                q.install()
        try:
            dashboard = Dashboard(
                dsn,
                table=args.table,
                history=args.history,
                authorize=token_authorize(token=token, basic=basic, read_only=args.read_only),
                refresh=args.refresh,
                login_challenge='Basic realm="pgqueue", charset="UTF-8"' if basic else None,
            )
        except (TypeError, ValueError) as exc:
            raise UsageError(str(exc)) from None
        app = asgi_app(login(dashboard, token), on_shutdown=dashboard.close)
        url = f"http://{args.host}:{args.port}/"
        if token and not args.token:
            url += f"?token={token}"
        print(f"pgqueue dashboard of {args.table}: {url}", file=sys.stderr, flush=True)
        uvicorn.run(
            app, host=args.host, port=args.port, log_level="info", access_log=False, lifespan="on"
        )
    return 0
