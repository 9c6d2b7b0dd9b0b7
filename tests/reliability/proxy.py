"""A TCP proxy on 127.0.0.1 in front of a PostgreSQL server, which a test can silence.

    with Proxy(dsn) as proxy:
        worker_dsn = proxy.dsn(keepalives_idle=1)   # the same server, through the proxy
        ...
        proxy.freeze()   # every open connection goes silent; new ones still work
        proxy.refuse()   # new connections are cut at once

`freeze` is what a NAT or a firewall that dropped its state, or a host
that died behind a load balancer, does to a client: its connections stay
open, no FIN, no RST, and nothing comes back, while a new connection goes
through. The proxy's own kernel still acknowledges what the client sends
(and its keepalive probes): only a client-side deadline notices, which is
what the worker's ``call_timeout`` is for. `refuse` is a server that is
down, restarting or full. Both together make the database unreachable.

Threads, one accept loop and two pumps per connection, each pump reading
with a short select so that a freeze takes effect at the next chunk.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

__all__ = ["Proxy"]

CHUNK = 65536
TICK = 0.1  # seconds a pump waits for data before it looks at its flags again


def _upstream_address(dsn: str) -> tuple[int, Any]:
    """The socket family and address the server of ``dsn`` listens on."""
    params = conninfo_to_dict(dsn)
    host = str(params.get("host") or "/var/run/postgresql")
    port = int(params.get("port") or 5432)
    if host.startswith("/"):
        return socket.AF_UNIX, f"{host}/.s.PGSQL.{port}"
    return socket.AF_INET, (host, port)


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with an RST rather than a FIN: a refused connection."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class _Link:
    """One client connection and its connection to the server."""

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client = client
        self.server = server
        self.frozen = threading.Event()
        self.closed = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        for src, dst in ((self.client, self.server), (self.server, self.client)):
            threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self.closed.is_set():
                if self.frozen.is_set():
                    # Silent: read nothing, write nothing, close nothing.
                    self.closed.wait()
                    return
                ready, _, _ = select.select([src], [], [], TICK)
                if not ready or self.frozen.is_set():
                    continue
                data = src.recv(CHUNK)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        # One side ended (and the link is not frozen): end the other too.
        self.close()

    def close(self) -> None:
        with self._lock:
            if self.closed.is_set():
                return
            self.closed.set()
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class Proxy:
    """Forwards 127.0.0.1:`port` to the server of ``dsn`` until `close`.

    Counters (for the test's messages): ``forwarded`` connections made
    through it, ``refused`` connections cut on arrival, ``frozen`` links
    silenced by `freeze`.
    """

    def __init__(self, dsn: str) -> None:
        self.upstream_dsn = dsn
        self._family, self._address = _upstream_address(dsn)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(TICK)
        self.port: int = self._listener.getsockname()[1]
        self._links: set[_Link] = set()
        self._lock = threading.Lock()
        self._refusing = threading.Event()
        self._closed = threading.Event()
        self.forwarded = 0
        self.refused = 0
        self.frozen = 0
        self._acceptor = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)
        self._acceptor.start()

    def dsn(self, **params: Any) -> str:
        """The server's DSN through the proxy, with ``params`` added (TCP options, say)."""
        return make_conninfo(self.upstream_dsn, host="127.0.0.1", port=str(self.port), **params)

    def freeze(self) -> int:
        """Silence every connection open now, in both directions, leaving it
        open; later connections are forwarded (unless `refuse`). Returns how
        many were silenced."""
        with self._lock:
            links = [link for link in self._links if not link.frozen.is_set()]
            for link in links:
                link.frozen.set()
            self.frozen += len(links)
        return len(links)

    def refuse(self, refusing: bool = True) -> None:
        """Cut new connections on arrival (an RST) until ``refuse(False)``."""
        if refusing:
            self._refusing.set()
        else:
            self._refusing.clear()

    def unreachable(self) -> None:
        """`refuse` and `freeze`: nothing the client sends, now or later, arrives."""
        self.refuse()
        self.freeze()

    def close(self) -> None:
        """Stop accepting and cut every connection, frozen or not (the server's
        side of each ends with it)."""
        self._closed.set()
        self._acceptor.join()
        self._listener.close()
        with self._lock:
            links, self._links = list(self._links), set()
        for link in links:
            link.close()

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self._refusing.is_set():
                self.refused += 1
                _reset(client)
                continue
            server = socket.socket(self._family, socket.SOCK_STREAM)
            try:
                server.connect(self._address)
            except OSError:
                server.close()
                _reset(client)
                continue
            link = _Link(client, server)
            with self._lock:
                if self._refusing.is_set():
                    # Refused (and maybe frozen) while this one was connecting:
                    # it must not slip through as the one live connection.
                    self.refused += 1
                    server.close()
                    _reset(client)
                    continue
                self._links = {lk for lk in self._links if not lk.closed.is_set()}
                self._links.add(link)
                self.forwarded += 1
            link.start()
