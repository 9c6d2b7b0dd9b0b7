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
from .parsers import leaf

__all__ = ["add_commands", "run_dashboard"]

log = logging.getLogger("pgqueue.web")


def add_commands(commands: Any) -> None:
    """``dashboard``."""
    parser = leaf(
        commands,
        "dashboard",
        run_dashboard,
        "serve the web dashboard (needs the web extra)",
        "Serve the web dashboard of a queue table. Without --dsn (or $PGQUEUE_DSN) it "
        "starts an embedded PostgreSQL and installs the table there. It prints a URL "
        "that logs one browser in, once (a session cookie follows); scripts send "
        "'Authorization: Bearer TOKEN'. Without a token or basic auth it makes up a "
        "token. Give secrets in the environment or a file, never on the command line.",
    )
    parser.add_argument(
        "--dsn",
        default=None,
        help="the database (default: $PGQUEUE_DSN; none: an embedded server). A password "
        "here is visible to every local user (ps, /proc): give it in $PGQUEUE_DSN, "
        "~/.pgpass or $PGPASSWORD instead",
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
    secret = parser.add_mutually_exclusive_group()
    secret.add_argument(
        "--token-file",
        metavar="PATH",
        help="read the login token (at least 16 characters) from this file; default: "
        "$PGQUEUE_DASHBOARD_TOKEN, else a random one",
    )
    secret.add_argument(
        "--token",
        help="the login token on the command line: NOT RECOMMENDED, every local user can read "
        "it (ps, /proc); use $PGQUEUE_DASHBOARD_TOKEN or --token-file",
    )
    basic = parser.add_mutually_exclusive_group()
    basic.add_argument(
        "--basic-auth-file",
        metavar="PATH",
        help="log in with HTTP basic auth instead, USER:PASSWORD read from this file "
        "(default: $PGQUEUE_DASHBOARD_BASIC_AUTH); the password at least 16 characters",
    )
    basic.add_argument(
        "--basic-auth",
        metavar="USER:PASSWORD",
        help="basic auth on the command line: NOT RECOMMENDED, every local user can read it; "
        "use $PGQUEUE_DASHBOARD_BASIC_AUTH or --basic-auth-file",
    )
    parser.add_argument(
        "--read-only",
        action="store_true",
        help="show everything, allow no action (the database sessions are read-only too)",
    )
    parser.add_argument(
        "--refresh",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="pages refresh this often while visible (default: 2; 0: never)",
    )


def read_secret(given: str | None, path: str | None, variable: str, flag: str) -> str | None:
    """A secret from the command line (warned against), a file, or the environment."""
    if given:
        log.warning(
            "%s on the command line is visible to every local user: use $%s or %s-file",
            flag, variable, flag,
        )  # fmt: skip
        return given
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{flag}-file: cannot read {path}: {exc}") from None
    return os.environ.get(variable) or None


def run_dashboard(args: argparse.Namespace) -> int:
    """``pgqueue dashboard``."""
    for module in ("jinja2", "uvicorn"):
        if importlib.util.find_spec(module) is None:
            raise UsageError(f"the dashboard needs {module}: pip install 'pgqueue-jobs[web]'")
    from psycopg.conninfo import conninfo_to_dict

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    # The dashboard's actions and failed logins at INFO; the embedded server's chatter, not.
    log.setLevel(logging.INFO)
    if args.dsn:
        try:
            has_password = bool(conninfo_to_dict(args.dsn).get("password"))
        except Exception as exc:  # psycopg.ProgrammingError: a malformed DSN
            raise UsageError(f"--dsn: {exc}") from None
        if has_password:
            log.warning(
                "a password in --dsn is visible to every local user: "
                "use $PGQUEUE_DSN, ~/.pgpass or $PGPASSWORD"
            )
    dsn_given = args.dsn or os.environ.get("PGQUEUE_DSN") or None
    token = read_secret(args.token, args.token_file, "PGQUEUE_DASHBOARD_TOKEN", "--token")
    basic_text = read_secret(
        args.basic_auth, args.basic_auth_file, "PGQUEUE_DASHBOARD_BASIC_AUTH", "--basic-auth"
    )
    basic = None
    if basic_text:
        user, sep, password = basic_text.partition(":")
        if not sep or not user or not password:
            raise UsageError("basic auth must be USER:PASSWORD, both non-empty")
        basic = (user, password)
    if args.refresh < 0:
        raise UsageError("--refresh must be 0 or more seconds")
    if token is None and basic is None:
        token = secrets.token_urlsafe(24)

    import uvicorn

    from .. import Queue
    from ..embedded import dsn_or_embedded
    from ..web import Dashboard
    from ..web.http import asgi_app
    from ..web.standalone import Login

    try:
        login = Login(token=token, basic=basic, port=args.port)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    with dsn_or_embedded(dsn_given) as dsn:
        if not dsn_given:
            with Queue(dsn, table=args.table) as q:
                q.install()
        try:
            dashboard = Dashboard(
                dsn,
                table=args.table,
                history=args.history,
                authorize=login.authorize,
                refresh=args.refresh,
                login_challenge='Basic realm="pgqueue", charset="UTF-8"' if basic else None,
                read_only=args.read_only,
            )
        except (TypeError, ValueError) as exc:
            raise UsageError(str(exc)) from None
        app = asgi_app(login.wrap(dashboard), on_shutdown=dashboard.close)
        url = login.url(f"http://{args.host}:{args.port}")
        print(f"pgqueue dashboard of {args.table}: {url}", file=sys.stderr, flush=True)
        uvicorn.run(
            app, host=args.host, port=args.port, log_level="info", access_log=False, lifespan="on"
        )
    return 0
