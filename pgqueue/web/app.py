"""`Dashboard`: the pages, the actions, and who may see or do what."""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from importlib import resources
from typing import Any, Final
from urllib.parse import urlencode

import psycopg
import psycopg.errors
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from psycopg_pool import PoolTimeout

from .. import __version__
from ..aio.queue import AsyncQueue
from ..core.dashboard import (
    CAP,
    SESSION_SETTINGS,
    BadFilter,
    DashboardCore,
    JobFilter,
    Throughput,
    parse_id,
)
from ..core.events import ActionListener, ActionName, OperatorAction, check_listener
from ..core.jobs import DEFAULT_VISIBILITY_TIMEOUT, ROW_STATUSES
from ..core.ops import Operation
from ..sync.driver import Driver
from ..sync.queue import Queue
from .actions import ACTIONS, MESSAGES
from .chart import throughput_svg
from .checks import CSRF_COOKIE, cross_site, csrf_token, flat, odd_input, to_int, with_headers
from .filters import ago, clock, summary, when
from .http import ASGIApp, Request, Response, WSGIApp, asgi_app, wsgi_app
from .pool import dashboard_pool

__all__ = ["ADMIN", "READ", "Authorize", "Dashboard"]

log = logging.getLogger("pgqueue.web")

ADMIN: Final = "admin"
"""A role that may see every page and act (retry, purge, cancel, pause ...)."""
READ: Final = "read"
"""A role that may see every page and do nothing."""
ROLES: Final = (ADMIN, READ)

Authorize = Callable[[Request], str | None]
"""The hook every request goes through: `ADMIN`, `READ`, or None (refused)."""

# Seconds a request for a whole payload waits for the one being sent.
RAW_WAIT: Final = 10.0
STATIC: Final = {
    "htmx.min.js": "text/javascript; charset=utf-8",
    "pgqueue.js": "text/javascript; charset=utf-8",
    "pgqueue.css": "text/css; charset=utf-8",
}
NAV: Final = (
    ("overview", "/", "Overview"),
    ("jobs", "/jobs", "Jobs"),
    ("dead", "/dead", "Dead"),
    ("running", "/running", "Running"),
    ("queues", "/queues", "Queues"),
    ("schedules", "/schedules", "Schedules"),
    ("limits", "/limits", "Limits"),
)


class Dashboard:
    """The web dashboard of one queue table: mount `asgi` or `wsgi` in your app.

        dashboard = Dashboard("postgresql://localhost/app", authorize=lambda r: "admin")
        app.mount("/pgqueue", dashboard.asgi)        # FastAPI, Starlette

    ``authorize(request)`` is required: it sees every request (a `Request`,
    with ``raw`` the ASGI scope or WSGI environ) and returns ``"admin"``
    (see and act), ``"read"`` (see only) or None (refused: 403, or 401 with
    ``login_challenge`` as its ``WWW-Authenticate``). It may set
    ``request.user``, which actions report.

    The dashboard opens a pool of its own (at most ``max_connections``) from
    the DSN, or from the conninfo of the queue given: autocommit, and the
    `pgqueue.core.dashboard.SESSION_SETTINGS` (a statement timeout among
    them). With ``read_only=True`` every role is ``"read"`` and its sessions
    are read-only in the database too (``default_transaction_read_only``).
    ``secret`` signs the CSRF tokens: give the same one to every process
    that serves the dashboard (default: random, per process).
    ``on_action`` receives an `pgqueue.OperatorAction` for every action,
    once it is written; every action is also logged (logger ``pgqueue.web``).
    Pages refresh every ``refresh`` seconds while their tab is visible.
    """

    def __init__(
        self,
        target: str | Queue | AsyncQueue,
        *,
        authorize: Authorize,
        table: str | None = None,
        history: bool | None = None,
        secret: str | bytes | None = None,
        on_action: ActionListener | Sequence[ActionListener] | None = None,
        refresh: float = 2.0,
        visibility_timeout: timedelta = DEFAULT_VISIBILITY_TIMEOUT,
        max_connections: int = 4,
        allowed_origins: Iterable[str] = (),
        login_challenge: str | None = None,
        read_only: bool = False,
    ) -> None:
        if not callable(authorize):
            raise TypeError("authorize must be a callable: request -> 'admin', 'read' or None")
        if isinstance(target, (Queue, AsyncQueue)):
            conninfo = target.conninfo
            table = target.table if table is None else table
            history = target.core.sql.history if history is None else history
        elif isinstance(target, str):
            conninfo = target
        else:
            raise TypeError(
                f"expected a DSN str or a pgqueue.Queue/AsyncQueue, not {type(target).__name__}"
            )
        if isinstance(refresh, bool) or not isinstance(refresh, (int, float)) or refresh < 0:
            raise ValueError("refresh must be a number of seconds, 0 for never")
        self.core = DashboardCore(table or "pgqueue_jobs", history=bool(history))
        self.table = self.core.queue.table
        self.authorize = authorize
        self.refresh = float(refresh)
        self.visibility_timeout = visibility_timeout
        self.allowed_origins = frozenset(o.rstrip("/") for o in allowed_origins)
        self.login_challenge = login_challenge
        self.read_only = bool(read_only)
        if isinstance(secret, str):
            secret = secret.encode()
        self._secret = secret or secrets.token_bytes(32)
        if on_action is None:
            self._listeners: list[ActionListener] = []
        elif callable(on_action):
            self._listeners = [on_action]
        else:
            self._listeners = list(on_action)
        for fn in self._listeners:
            check_listener(fn)
        self._driver = Driver(
            dashboard_pool(conninfo, max_connections, read_only=self.read_only), owned=True
        )
        # Written and read under `_lock` (requests run in several threads).
        self._throughput = Throughput()
        self._lock = threading.Lock()
        # A whole payload is the one answer whose size its data sets: one at
        # a time, so that its memory is paid once however many are asked for.
        self._raw = threading.Semaphore(1)
        self.raw_wait = RAW_WAIT
        self._env = Environment(
            loader=PackageLoader("pgqueue.web", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )
        self._env.filters.update(ago=ago, clock=clock, when=when, summary=summary)
        self._static = {
            name: resources.files("pgqueue.web").joinpath("static", name).read_bytes()
            for name in STATIC
        }
        self.asgi: ASGIApp = asgi_app(self.handle, on_shutdown=self.close)
        """The dashboard as an ASGI application."""
        self.wsgi: WSGIApp = wsgi_app(self.handle)
        """The dashboard as a WSGI application."""

    def close(self) -> None:
        """Close the dashboard's pool."""
        self._driver.close()

    def __enter__(self) -> Dashboard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the request's way ---------------------------------------------------

    def handle(self, request: Request) -> Response:
        """Answer one request: authorize, check, route, render."""
        if request.method == "GET" and request.path.startswith("/static/"):
            return self._static_file(request.path[len("/static/") :])
        odd = odd_input(request)
        if odd:
            return with_headers(Response.text(f"bad request: {odd}", 400))
        cookie = request.cookies.get(CSRF_COOKIE, "")
        new_cookie = None
        if len(cookie) != 43:
            cookie = new_cookie = secrets.token_urlsafe(32)
        try:
            response = self._authorized(request, cookie)
        except BadFilter as exc:
            response = self._page(request, "error.html", cookie, status=400, problem=str(exc))
        except psycopg.errors.QueryCanceled:
            response = self._page(
                request,
                "error.html",
                cookie,
                status=503,
                problem=f"The database did not answer within the dashboard's statement timeout "
                f"({SESSION_SETTINGS['statement_timeout']}): try a narrower filter.",
            )
        except (psycopg.Error, PoolTimeout) as exc:
            log.warning("dashboard: database error: %s", exc)
            response = self._page(
                request, "error.html", cookie, status=503, problem=f"Database error: {exc}"
            )
        with_headers(response)
        if new_cookie is not None:
            secure = "; Secure" if request.scheme == "https" else ""
            response.headers.append(
                (
                    "set-cookie",
                    f"{CSRF_COOKIE}={new_cookie}; Path={request.root or '/'}; HttpOnly; "
                    f"SameSite=Strict{secure}",
                )
            )
        return response

    def _authorized(self, request: Request, cookie: str) -> Response:
        role = self.authorize(request)
        if role is None:
            response = Response.text("not authorized", 401 if self.login_challenge else 403)
            if self.login_challenge:
                response.headers.append(("www-authenticate", self.login_challenge))
            return response
        if role not in ROLES:
            raise ValueError(f"authorize returned {role!r}; expected 'admin', 'read' or None")
        if self.read_only:
            role = READ
        path = request.path.rstrip("/") or "/"
        if request.method == "POST":
            action = ACTIONS.get(path)
            if action is None:
                return Response.text("not found", 404)
            if role != ADMIN:
                return Response.text("read-only: this action needs the admin role", 403)
            refusal = cross_site(request, cookie, self._secret, self.allowed_origins)
            if refusal:
                log.warning("dashboard: refused %s %s: %s", request.method, path, refusal)
                return Response.text(f"refused: {refusal}", 403)
            return action(self, request)
        if request.method not in ("GET", "HEAD"):
            return Response.text("method not allowed", 405)
        view = PAGES.get(path)
        if view is None and path.startswith("/jobs/"):
            job_id, _, rest = path[len("/jobs/") :].partition("/")
            try:
                found = parse_id(job_id)
            except BadFilter:
                return Response.text("not found: no such job id", 404)
            if rest == "payload.json":
                return self._payload_json(found)
            if not rest:
                return self._detail(request, role, cookie, found)
        if view is None:
            return Response.text("not found", 404)
        return view(self, request, role, cookie)

    def _static_file(self, name: str) -> Response:
        if name not in STATIC:
            return Response.text("not found", 404)
        return Response(
            200,
            self._static[name],
            [("content-type", STATIC[name]), ("cache-control", "public, max-age=3600")],
        )

    def _run(self, op: Operation[Any]) -> Any:
        return self._driver.run(op)

    def _page(
        self, request: Request, template: str, cookie: str, *, status: int = 200, **context: Any
    ) -> Response:
        root = request.root

        def url(path: str, **query: Any) -> str:
            args = {k: v for k, v in query.items() if v not in (None, "")}
            return root + path + ("?" + urlencode(args) if args else "")

        done = request.arg("done")
        message = MESSAGES.get(done, "").format(n=to_int(request.arg("n")))
        html = self._env.get_template(template).render(
            url=url,
            static=lambda name: f"{root}/static/{name}?v={__version__}",
            csrf=csrf_token(self._secret, cookie),
            here=root
            + request.path
            + (("?" + urlencode(request.query, doseq=True)) if request.query else ""),
            nav=NAV,
            table=self.table,
            refresh=self.refresh,
            message=message,
            user=request.user,
            cap=CAP,
            **context,
        )
        return Response.html(html, status)

    # -- pages -----------------------------------------------------------------

    def _overview(self, request: Request, role: str, cookie: str) -> Response:
        ov = self._run(self.core.overview(self.visibility_timeout))
        with self._lock:
            if ov.inserted is not None and ov.deleted is not None:
                self._throughput.add(ov.now, ov.inserted, ov.deleted)
            minutes = self._throughput.per_minute()
            since = self._throughput.since
        return self._page(
            request,
            "overview.html",
            cookie,
            page="overview",
            role=role,
            ov=ov,
            now=ov.now,
            since=since,
            chart=Markup(throughput_svg(minutes)) if minutes else None,
            statuses=list(ROW_STATUSES),
        )

    def _jobs(self, request: Request, role: str, cookie: str) -> Response:
        where = JobFilter.parse(flat(request.query))
        page = self._run(self.core.jobs(where, before=_before(request)))
        return self._page(
            request, "jobs.html", cookie, page="jobs", role=role, where=where, result=page,
            now=page.now, statuses=list(ROW_STATUSES),
        )  # fmt: skip

    def _dead(self, request: Request, role: str, cookie: str) -> Response:
        query = flat(request.query)
        query["status"] = "dead"
        where = JobFilter.parse(query)
        page = self._run(self.core.jobs(where, before=_before(request)))
        return self._page(
            request, "dead.html", cookie, page="dead", role=role, where=where, result=page,
            now=page.now,
        )  # fmt: skip

    def _running(self, request: Request, role: str, cookie: str) -> Response:
        after = None
        if request.arg("after_at"):
            try:
                after = (
                    datetime.fromisoformat(request.arg("after_at")),
                    parse_id(request.arg("after_id"), "after_id"),
                )
            except ValueError:
                raise BadFilter("after_at and after_id must be a timestamp and a job id") from None
        page = self._run(self.core.running(after=after))
        return self._page(
            request, "running.html", cookie, page="running", role=role, result=page, now=page.now
        )

    def _queues(self, request: Request, role: str, cookie: str) -> Response:
        ov = self._run(self.core.overview(self.visibility_timeout))
        return self._page(
            request, "queues.html", cookie, page="queues", role=role, ov=ov, now=ov.now
        )

    def _schedules(self, request: Request, role: str, cookie: str) -> Response:
        rows = self._run(self.core.queue.schedules())
        return self._page(
            request, "schedules.html", cookie, page="schedules", role=role, schedules=rows, now=None
        )

    def _limits(self, request: Request, role: str, cookie: str) -> Response:
        rows = self._run(self.core.queue.limits())
        return self._page(
            request, "limits.html", cookie, page="limits", role=role, limits=rows, now=None
        )

    def _payload_json(self, job_id: int) -> Response:
        """A job's whole payload, as the raw JSON its page links to (one at a time)."""
        if not self._raw.acquire(timeout=self.raw_wait):
            return Response.text("busy: whole payloads are sent one at a time; try again", 503)
        try:
            text = self._run(self.core.payload_json(job_id))
            if text is None:
                return Response.text("not found: the job is not in the table", 404)
            return Response(200, text.encode(), [("content-type", "application/json")])
        finally:
            self._raw.release()

    def _detail(self, request: Request, role: str, cookie: str, job_id: int) -> Response:
        detail = self._run(self.core.detail(job_id))
        status = 200 if detail.job or detail.result or detail.history else 404
        return self._page(
            request, "job.html", cookie, status=status, page="jobs", role=role, d=detail,
            now=detail.now,
        )  # fmt: skip

    # -- actions ----------------------------------------------------------------

    def _report(self, request: Request, name: ActionName, **fields: Any) -> None:
        action = OperatorAction(name, self.table, request.user, **fields)
        log.info(
            "dashboard: %s %s by %s: jobs %s %s",
            name, action.target or "", request.user or "(unnamed)", list(action.job_ids),
            action.detail or "",
        )  # fmt: skip
        for listener in self._listeners:
            try:
                listener(action)
            except Exception:
                log.exception("dashboard: an action listener failed")


Page = Callable[[Dashboard, Request, str, str], Response]
PAGES: Final[dict[str, Page]] = {
    "/": Dashboard._overview,
    "/jobs": Dashboard._jobs,
    "/dead": Dashboard._dead,
    "/running": Dashboard._running,
    "/queues": Dashboard._queues,
    "/schedules": Dashboard._schedules,
    "/limits": Dashboard._limits,
}


def _before(request: Request) -> int | None:
    before = request.arg("before")
    return parse_id(before, "before") if before else None
