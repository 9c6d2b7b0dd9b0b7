"""The dashboard served alone (``pgqueue dashboard``): who may in, and how a browser logs in.

A script sends the token as ``Authorization: Bearer TOKEN`` (or basic auth)
on every request. A browser logs in once, with the one-time code of the URL
the command prints or with the token typed into the login form, and gets a
session: a random id with an expiry, in an HttpOnly cookie. The token
itself is never a cookie and never in a URL, so neither the browser's
history nor another server ever sees it.

Browsers send a host's cookies to every port of that host. So the session
cookie is scoped by path, not only named with the port: the dashboard's
pages live under a random path of this process (``/s/<random>/``) and the
cookie is sent there only. A page served on another port of the same host
would have to guess that path to receive it.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from html import escape
from typing import Final

from .app import ADMIN, Authorize, Dashboard
from .http import Request, Response

__all__ = ["MIN_SECRET_LENGTH", "Login", "token_authorize"]

log = logging.getLogger("pgqueue.web")

MIN_SECRET_LENGTH: Final = 16
"""Tokens and passwords shorter than this are refused."""
SESSION_TTL: Final = 12 * 3600.0
"""Seconds a browser's session lasts after its login."""
MAX_SESSIONS: Final = 1000
"""Sessions kept at most: a new login beyond them ends the oldest."""
FAILED_LOGIN_DELAY: Final = 1.0
"""Seconds a failed login waits before its answer."""
FAILED_LOG_EVERY: Final = 10.0
"""Failed logins are logged at most once per this many seconds (with a count)."""


def check_secret(value: str, what: str) -> str:
    """``value`` if it is long enough to be a secret; `ValueError` otherwise."""
    if len(value) < MIN_SECRET_LENGTH:
        raise ValueError(f"{what} must be at least {MIN_SECRET_LENGTH} characters long")
    return value


def _same(offered: str, secret: str) -> bool:
    # Bytes: compare_digest refuses str with non-ASCII characters.
    return hmac.compare_digest(offered.encode("utf-8", "replace"), secret.encode())


class FailedLogins:
    """Slows every failed login by ``delay`` seconds, and logs them at most
    once per ``every`` seconds (the line says how many there were)."""

    def __init__(self, delay: float = FAILED_LOGIN_DELAY, every: float = FAILED_LOG_EVERY) -> None:
        self.delay = delay
        self.every = every
        # Written and read under `_lock`.
        self._lock = threading.Lock()
        self._unlogged = 0
        self._logged_at: float | None = None

    def record(self, request: Request, how: str) -> None:
        """One failed login (``how``: what was wrong); returns after the delay."""
        now = time.monotonic()
        with self._lock:
            self._unlogged += 1
            if self._logged_at is None or now - self._logged_at >= self.every:
                log.warning(
                    "dashboard: failed login from %s: %s (%d failed since the last such line)",
                    _peer(request), how, self._unlogged,
                )  # fmt: skip
                self._unlogged = 0
                self._logged_at = now
        time.sleep(self.delay)


def _peer(request: Request) -> str:
    raw = request.raw
    if isinstance(raw, dict):
        client = raw.get("client")
        if client:
            return str(client[0])
        if raw.get("REMOTE_ADDR"):
            return str(raw["REMOTE_ADDR"])
    return "an unknown address"


def _basic(request: Request, basic: tuple[str, str]) -> bool | None:
    """Basic credentials: right (True), wrong (False), or none offered (None)."""
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, _, password = base64.b64decode(credentials, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    if _same(user, basic[0]) & _same(password, basic[1]):
        request.user = user
        return True
    return False


def _bearer(request: Request) -> str | None:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return credentials if scheme.lower() == "bearer" else None


def token_authorize(
    *,
    token: str | None,
    basic: tuple[str, str] | None,
    read_only: bool = False,
    failed: FailedLogins | None = None,
) -> Authorize:
    """An ``authorize`` hook for a dashboard mounted in an application:
    ``Authorization: Bearer TOKEN``, or the basic-auth user and password, may
    in (as admin, or read-only with ``read_only``); a wrong one is slowed and
    logged by ``failed``. Both secrets must be at least `MIN_SECRET_LENGTH` long."""
    if token is not None:
        check_secret(token, "the token")
    if basic is not None:
        check_secret(basic[1], "the basic-auth password")
    role = "read" if read_only else ADMIN
    failed = failed or FailedLogins()

    def authorize(request: Request) -> str | None:
        offered = _bearer(request)
        if offered is not None:
            if token is not None and _same(offered, token):
                return role
            failed.record(request, "wrong bearer token")
            return None
        if basic is not None:
            right = _basic(request, basic)
            if right:
                return role
            if right is False:
                failed.record(request, "wrong basic-auth user or password")
        return None

    return authorize


class Login:
    """The login of ``pgqueue dashboard``: bearer token or basic auth for
    scripts, sessions for browsers (token mode only: a browser keeps basic
    credentials per origin itself, port included).

        login = Login(token=token, basic=None, port=8787)
        app = asgi_app(login.wrap(Dashboard(dsn, authorize=login.authorize)))
        print(login.url("http://127.0.0.1:8787"))   # logs a browser in, once

    The session cookie is named with the ``port`` and scoped to `prefix`
    (``Secure`` when the request came by https); sessions live in this
    process (a restart logs every browser out).
    """

    def __init__(
        self,
        *,
        token: str | None,
        basic: tuple[str, str] | None,
        port: int,
        ttl: float = SESSION_TTL,
        failed: FailedLogins | None = None,
    ) -> None:
        if token is None and basic is None:
            raise ValueError("a login needs a token or basic-auth credentials")
        self.failed = failed or FailedLogins()
        self._headers = token_authorize(token=token, basic=basic, failed=self.failed)
        self.token = token
        self.ttl = ttl
        self.cookie = f"pgqueue_session_{port}"
        self.prefix = "/s/" + secrets.token_urlsafe(16)
        # Written and read under `_lock` (requests run in several threads).
        self._lock = threading.Lock()
        # Session id -> when it expires (time.monotonic()), oldest first.
        self._sessions: OrderedDict[str, float] = OrderedDict()
        self._code: str | None = secrets.token_urlsafe(24) if token is not None else None
        self._base = ""  # where `url` last said the dashboard is

    def url(self, base: str) -> str:
        """The URL that logs one browser in (its code works once; each use
        logs the next), or the dashboard's URL when browsers log in with basic auth."""
        self._base = base.rstrip("/")
        if self._code is None:
            return self._base + "/"
        return f"{self._base}/login?code={self._code}"

    # -- who is asking ---------------------------------------------------------

    def authorize(self, request: Request) -> str | None:
        """The dashboard's hook: a session (under `prefix`), a bearer token or basic auth."""
        if request.root.endswith(self.prefix) and self._session(request):
            return ADMIN
        return self._headers(request)

    def _session(self, request: Request) -> bool:
        """The request carries a session cookie that is still valid."""
        sid = request.cookies.get(self.cookie, "")
        if not sid:
            return False
        now = time.monotonic()
        with self._lock:
            expires = self._sessions.get(sid)
            if expires is not None and expires <= now:
                del self._sessions[sid]
                return False
            return expires is not None

    def _new_session(self, request: Request) -> Response:
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions[sid] = time.monotonic() + self.ttl
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        secure = "; Secure" if request.scheme == "https" else ""
        response = Response.redirect(request.root + self.prefix + "/")
        response.headers.append(
            (
                "set-cookie",
                f"{self.cookie}={sid}; Path={request.root}{self.prefix}; Max-Age={int(self.ttl)}; "
                f"HttpOnly; SameSite=Strict{secure}",
            )
        )
        return response

    # -- the handler in front of the dashboard ---------------------------------

    def wrap(self, dashboard: Dashboard) -> Callable[[Request], Response]:
        """The handler that serves ``/login`` and the session's pages, then the dashboard."""

        def handle(request: Request) -> Response:
            path = request.path
            if self.token is None:
                return dashboard.handle(request)  # basic auth: no sessions
            if path == self.prefix or path.startswith(self.prefix + "/"):
                request.path = path[len(self.prefix) :] or "/"
                request.root += self.prefix
                response = dashboard.handle(request)
                if (
                    response.status in (401, 403)
                    and not self._session(request)
                    and _bearer(request) is None
                ):
                    return Response.redirect(request.root[: -len(self.prefix)] + "/login")
                return response
            if path == "/login":
                return self._login(request)
            asks = "authorization" not in request.headers and request.method == "GET"
            if asks and not path.startswith("/static/"):
                return Response.redirect(request.root + "/login")
            return dashboard.handle(request)

        return handle

    def _login(self, request: Request) -> Response:
        if request.method == "GET":
            code = request.arg("code")
            if not code:
                return _login_form(request)
            with self._lock:
                right = self._code is not None and _same(code, self._code)
                if right:  # once: the next browser gets the next code
                    self._code = secrets.token_urlsafe(24)
            if right:
                log.info(
                    "dashboard: a browser logged in with the login link; the next one: %s",
                    self.url(self._base),
                )
                return self._new_session(request)
            self.failed.record(request, "a wrong or used login code")
            return _login_form(request, "That login link was used already or is wrong.", 403)
        if request.method == "POST":
            origin = request.headers.get("origin")
            if origin is not None and origin != request.origin:
                return Response.text("refused: a login from another site", 403)
            if self.token is not None and _same(request.field("token"), self.token):
                return self._new_session(request)
            self.failed.record(request, "a wrong token in the login form")
            return _login_form(request, "Wrong token.", 403)
        return Response.text("method not allowed", 405)


def _login_form(request: Request, problem: str = "", status: int = 200) -> Response:
    note = f'<p class="flash" role="alert">{escape(problem)}</p>' if problem else ""
    action = escape(request.root + "/login")
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Log in · pgqueue</title>
<link rel="stylesheet" href="{escape(request.root)}/static/pgqueue.css"></head>
<body><main><h1>pgqueue dashboard</h1>{note}
<form method="post" action="{action}">
<label>Token <input type="password" name="token" autocomplete="current-password" required></label>
<button type="submit">Log in</button></form>
<p class="note">Or open the login link <code>pgqueue dashboard</code> printed (it works once).</p>
</main></body></html>"""
    response = Response.html(page, status)
    response.headers += [
        ("content-security-policy", "default-src 'none'; style-src 'self'; form-action 'self'"),
        ("cache-control", "no-store"),
        ("x-frame-options", "DENY"),
    ]
    return response
