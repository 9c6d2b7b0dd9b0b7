"""What a request may hold before anything reads it, what every response
carries, and the small readings of a query that the pages share."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from typing import Final
from urllib.parse import parse_qsl, urlsplit

from .http import Request, Response

__all__ = [
    "CSRF_COOKIE",
    "SECURITY_HEADERS",
    "cross_site",
    "csrf_token",
    "flat",
    "local_target",
    "odd_input",
    "pairs",
    "to_int",
    "with_headers",
]

# The cookie that holds a browser's CSRF secret.
CSRF_COOKIE: Final = "pgqueue_csrf"
# No inline script, no eval, no frame: what the pages need and nothing more.
SECURITY_HEADERS: Final = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "same-origin"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-store"),
]


def with_headers(response: Response) -> Response:
    response.headers += SECURITY_HEADERS
    return response


def _control(text: str) -> bool:
    return any(c < " " or c == "\x7f" for c in text)


def odd_input(request: Request) -> str | None:
    """Why a request is refused before anything reads it (a control
    character, CR/LF among them, in its path, query or form); None if fine."""
    if _control(request.path):
        return "a control character in the path"
    for where, fields in (("query", request.query), ("form", request.form)):
        for name, values in fields.items():
            if _control(name) or any(_control(v) for v in values):
                return f"a control character in the {where}"
    return None


def local_target(target: str, root: str) -> str | None:
    """``target`` if it is a path of this dashboard (no scheme, no other host,
    ASCII only, no control character); else None."""
    if not target.isascii() or _control(target) or "\\" in target:
        return None
    if not target.startswith(root + "/") or target.startswith("//"):
        return None
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return None
    return target


def flat(query: dict[str, list[str]]) -> dict[str, str]:
    return {k: v[0] for k, v in query.items() if v}


def pairs(query: str) -> list[tuple[str, str]]:
    return parse_qsl(query, keep_blank_values=True)


def to_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def cross_site(
    request: Request, cookie: str, secret: bytes, allowed_origins: Iterable[str]
) -> str | None:
    """Why a POST is refused: from another site, or without the page's token; None if fine."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return f"cross-site request (Sec-Fetch-Site: {fetch_site})"
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        referer = request.headers.get("referer")
        if not referer:
            return "no Origin or Referer header"
        parts = urlsplit(referer)
        origin = f"{parts.scheme}://{parts.netloc}"
    origin = origin.rstrip("/")
    if origin != request.origin and origin not in allowed_origins:
        return f"origin {origin} is not this dashboard's"
    if not hmac.compare_digest(request.field("csrf").encode(), csrf_token(secret, cookie).encode()):
        return "missing or wrong CSRF token (reload the page)"
    return None


def csrf_token(secret: bytes, cookie: str) -> str:
    """The token a page's forms carry: the cookie's secret, signed."""
    return hmac.new(secret, cookie.encode(), hashlib.sha256).hexdigest()
