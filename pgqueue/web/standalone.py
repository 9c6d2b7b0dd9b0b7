"""The dashboard served alone (``pgqueue dashboard``): a token or basic-auth login."""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Callable
from urllib.parse import urlencode

from .app import ADMIN, READ, Authorize, Dashboard
from .http import Request, Response

__all__ = ["TOKEN_COOKIE", "login", "token_authorize"]

TOKEN_COOKIE = "pgqueue_token"


def token_authorize(
    *, token: str | None, basic: tuple[str, str] | None, read_only: bool = False
) -> Authorize:
    """An ``authorize`` hook: a request with the token (``Authorization: Bearer``
    or the cookie `login` sets) or the basic-auth user and password may in;
    as admin, or read-only with ``read_only``."""
    role = READ if read_only else ADMIN

    def authorize(request: Request) -> str | None:
        given = request.headers.get("authorization", "")
        scheme, _, credentials = given.partition(" ")
        if token is not None:
            offered = (
                credentials if scheme.lower() == "bearer" else request.cookies.get(TOKEN_COOKIE, "")
            )
            if offered and hmac.compare_digest(offered.encode(), token.encode()):
                return role
        if basic is not None and scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(credentials).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return None
            if hmac.compare_digest(user.encode(), basic[0].encode()) & hmac.compare_digest(
                password.encode(), basic[1].encode()
            ):
                request.user = user
                return role
        return None

    return authorize


def login(dashboard: Dashboard, token: str | None) -> Callable[[Request], Response]:
    """Not a page: the handler in front of ``dashboard.handle`` that trades a
    ``?token=`` in the URL for an HttpOnly cookie, and redirects to the URL
    without it (so the token leaves the address bar and the history)."""

    def handle(request: Request) -> Response:
        offered = request.arg("token")
        if token is not None and offered and request.method == "GET":
            if not hmac.compare_digest(offered.encode(), token.encode()):
                return Response.text("wrong token", 403)
            rest = {k: v for k, v in request.query.items() if k != "token"}
            location = (request.root + request.path) + (
                "?" + urlencode(rest, doseq=True) if rest else ""
            )
            response = Response.redirect(location)
            response.headers.append(
                ("set-cookie", f"{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict")
            )
            return response
        return dashboard.handle(request)

    return handle
