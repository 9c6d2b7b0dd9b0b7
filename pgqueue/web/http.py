"""The dashboard's HTTP surface: one request, one response, and two thin adapters.

`Dashboard.handle` is a plain function from a `Request` to a `Response`.
`asgi_app` and `wsgi_app` only translate: ASGI scope and body, or WSGI
environ, into a `Request`; the `Response` back into the server's calls. The
handler runs its (short) queries on a sync connection pool: under ASGI, in
a worker thread (``anyio.to_thread``), so that it works on asyncio (Starlette,
FastAPI, Django) and on trio alike, and never blocks the event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qs

import anyio.to_thread

__all__ = ["MAX_BODY", "Request", "Response", "asgi_app", "wsgi_app"]

# A form the dashboard posts is a few ids; anything larger is refused.
MAX_BODY = 1 << 20


@dataclass
class Request:
    """One HTTP request, as the dashboard (and its ``authorize`` hook) sees it."""

    method: str
    path: str
    """Below the mount point, starting with ``/``."""
    root: str
    """The mount point (ASGI ``root_path``, WSGI ``SCRIPT_NAME``), without a trailing ``/``."""
    query: dict[str, list[str]]
    headers: dict[str, str]
    """Lower-case names; repeated headers joined with ``, ``."""
    form: dict[str, list[str]] = field(default_factory=dict)
    scheme: str = "http"
    raw: Any = None
    """The ASGI scope or the WSGI environ, for hooks that need more."""
    user: str | None = None
    """Who is asking: the ``authorize`` hook may set it; actions report it."""

    @property
    def host(self) -> str:
        return self.headers.get("host", "")

    @property
    def origin(self) -> str:
        """This request's own origin, ``scheme://host``."""
        return f"{self.scheme}://{self.host}"

    @property
    def cookies(self) -> dict[str, str]:
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(self.headers.get("cookie", ""))
        except CookieError:
            return {}
        return {k: m.value for k, m in jar.items()}

    def arg(self, name: str, default: str = "") -> str:
        """The first value of a query string argument."""
        values = self.query.get(name)
        return values[0] if values else default

    def field(self, name: str, default: str = "") -> str:
        """The first value of a form field."""
        values = self.form.get(name)
        return values[0] if values else default


@dataclass
class Response:
    """What the dashboard answers."""

    status: int = 200
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def html(cls, text: str, status: int = 200) -> Response:
        return cls(status, text.encode(), [("content-type", "text/html; charset=utf-8")])

    @classmethod
    def text(cls, text: str, status: int) -> Response:
        return cls(status, text.encode(), [("content-type", "text/plain; charset=utf-8")])

    @classmethod
    def redirect(cls, location: str) -> Response:
        """303 See Other: after a POST, the browser GETs ``location``."""
        return cls(303, b"", [("location", location)])


def _form(content_type: str, body: bytes) -> dict[str, list[str]]:
    if content_type.split(";")[0].strip().lower() != "application/x-www-form-urlencoded":
        return {}
    return parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)


Handler = Callable[[Request], Response]


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def asgi_app(handle: Handler, *, on_shutdown: Callable[[], None] | None = None) -> ASGIApp:
    """An ASGI 3 application around ``handle`` (lifespan too, for a server that runs it alone)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    if on_shutdown is not None:
                        await anyio.to_thread.run_sync(on_shutdown)
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            raise RuntimeError(f"the pgqueue dashboard serves HTTP, not {scope['type']}")
        body = bytearray()
        too_big = False
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > MAX_BODY:
                too_big = True
                break
            if not message.get("more_body", False):
                break
        headers: dict[str, str] = {}
        for name, value in scope.get("headers", []):
            key = name.decode("latin-1").lower()
            text = value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        root = scope.get("root_path", "").rstrip("/")
        path = scope.get("path", "/")
        # Starlette's Mount keeps the whole path and puts the prefix in root_path.
        if root and path.startswith(root + "/"):
            path = path[len(root) :]
        elif root and path == root:
            path = "/"
        request = Request(
            method=scope.get("method", "GET"),
            path=path or "/",
            root=root,
            query=parse_qs(
                scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True
            ),
            headers=headers,
            form=_form(headers.get("content-type", ""), bytes(body)),
            scheme=scope.get("scheme", "http"),
            raw=scope,
        )
        if too_big:
            response = Response.text("request body too large", 413)
        else:
            response = await anyio.to_thread.run_sync(handle, request)
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": [
                    (k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers
                ],
            }
        )
        await send({"type": "http.response.body", "body": response.body})

    return app


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def wsgi_app(handle: Handler) -> WSGIApp:
    """A WSGI application around ``handle``."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        headers = {
            key[5:].replace("_", "-").lower(): value
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }
        for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            if environ.get(key):
                headers[key.replace("_", "-").lower()] = environ[key]
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > MAX_BODY:
            response = Response.text("request body too large", 413)
        else:
            body = environ["wsgi.input"].read(length) if length > 0 else b""
            # PATH_INFO is bytes-as-latin-1 (PEP 3333).
            path = environ.get("PATH_INFO", "").encode("latin-1").decode("utf-8", "replace")
            request = Request(
                method=environ.get("REQUEST_METHOD", "GET"),
                path=path or "/",
                root=environ.get("SCRIPT_NAME", "").rstrip("/"),
                query=parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True),
                headers=headers,
                form=_form(headers.get("content-type", ""), body),
                scheme=environ.get("wsgi.url_scheme", "http"),
                raw=environ,
            )
            response = handle(request)
        reason = HTTPStatus(response.status).phrase
        start_response(f"{response.status} {reason}", response.headers)
        return [response.body]

    return app
