"""The HTTP endpoints of ``pgqueue worker``: health probes and Prometheus metrics.

``--health-port`` serves ``/livez`` (the worker's event loop is turning)
and ``/readyz`` (it reached the database recently): 200 when so, 503 when
not, each with a JSON body that says why (`pgqueue.core.health`).
``--metrics-port`` serves the metrics at ``/metrics``. Given the same
port, one server answers both. Each server runs in a daemon thread of its
own, so that a probe is answered whatever the worker's event loop does.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from ..core.health import HealthReport
from .errors import OperationFailed, UsageError

__all__ = ["HEALTH_PATHS", "Endpoints", "HttpOptions", "health_app", "serve_endpoints"]

log = logging.getLogger("pgqueue.cli")

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

HEALTH_PATHS = {"/livez": "live", "/readyz": "ready"}
"""The probe paths, and which answer of a `HealthReport` each gives."""


@dataclass(frozen=True)
class HttpOptions:
    """What a worker command serves over HTTP: ``--metrics-port`` and
    ``--health-port``, each on its host (None: not served)."""

    metrics_port: int | None = None
    metrics_host: str = "0.0.0.0"
    health_port: int | None = None
    health_host: str = "0.0.0.0"


def health_app(report: Callable[[], HealthReport], fallback: WSGIApp | None = None) -> WSGIApp:
    """``/livez`` and ``/readyz`` from ``report()``; any other path to ``fallback`` (or 404)."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        probe = HEALTH_PATHS.get(path.rstrip("/") or "/")
        if probe is None:
            if fallback is not None:
                return fallback(environ, start_response)
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"not found: the health probes are /livez and /readyz\n"]
        now = report()
        ok = now.live if probe == "live" else now.ready
        body = json.dumps(now.as_json()).encode() + b"\n"
        status = "200 OK" if ok else "503 Service Unavailable"
        start_response(status, [("Content-Type", "application/json"),
                                ("Content-Length", str(len(body)))])  # fmt: skip
        return [body]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _IPv6Server(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr: a probe every few seconds would fill it."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class Endpoints:
    """The servers started; `close` stops them."""

    servers: list[WSGIServer] = field(default_factory=list)

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


def serve_endpoints(
    http: HttpOptions, *, metrics: WSGIApp | None, health: Callable[[], HealthReport]
) -> Endpoints:
    """Start a server for the metrics and one for the probes, or one for both."""
    metrics_port, metrics_host = http.metrics_port, http.metrics_host
    health_port, health_host = http.health_port, http.health_host
    endpoints = Endpoints()
    try:
        if health_port is not None:
            if health_port == metrics_port:
                if health_host != metrics_host:
                    raise UsageError(
                        "--health-port is --metrics-port: give them one host "
                        "(--health-host and --metrics-host differ)"
                    )
                both = health_app(health, fallback=metrics)
                endpoints.servers.append(_start(both, metrics_host, health_port, "metrics"))
                log.info("serving health probes (/livez, /readyz) and Prometheus metrics "
                         "(/metrics) on port %d of %s", health_port, health_host)  # fmt: skip
                return endpoints
            endpoints.servers.append(
                _start(health_app(health), health_host, health_port, "health probes")
            )
            log.info("serving health probes (/livez, /readyz) on port %d of %s", health_port,
                     health_host)  # fmt: skip
        if metrics is not None and metrics_port is not None:
            endpoints.servers.append(_start(metrics, metrics_host, metrics_port, "metrics"))
            log.info("serving Prometheus metrics on port %d of %s (/metrics)", metrics_port,
                     metrics_host)  # fmt: skip
    except BaseException:
        endpoints.close()
        raise
    return endpoints


def _start(app: WSGIApp, host: str, port: int, what: str) -> WSGIServer:
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as exc:
        raise OperationFailed(f"cannot serve {what} on {host}: {exc}") from exc
    server_class = _IPv6Server if family == socket.AF_INET6 else _Server
    try:
        server = make_server(host, port, app, server_class, _QuietHandler)
    except OSError as exc:
        raise OperationFailed(f"cannot serve {what} on port {port}: {exc}") from exc
    thread = threading.Thread(target=server.serve_forever, name=f"pgqueue-http-{port}", daemon=True)
    thread.start()
    return server
