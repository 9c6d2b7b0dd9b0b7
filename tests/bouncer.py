"""A throwaway PgBouncer in front of the test server, in transaction pooling mode.

`pgbouncer` starts Debian's ``pgbouncer`` binary (``.ci/run`` installs it
when missing; ``PGQUEUE_TEST_PGBOUNCER_BIN`` names another) as a subprocess
with an ini file and a user list of its own in a new directory, listening
on a free port of 127.0.0.1. Every database name reaches the database of
that name on the server (a fallback ``*`` entry), so the suite's
``empty_database`` works through it. As root, PgBouncer (which refuses to
run as root) runs as the same unprivileged user as the suite's servers.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .servers import SERVER_USER, run_as

BINARY = os.environ.get("PGQUEUE_TEST_PGBOUNCER_BIN", "/usr/sbin/pgbouncer")
# How long PgBouncer may take to accept connections before the fixture gives up.
START_TIMEOUT = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _server_entry(server_dsn: str) -> str:
    """The ``[databases]`` value that reaches the server ``server_dsn`` names."""
    params = conninfo_to_dict(server_dsn)
    parts = []
    for key in ("host", "port", "user", "password"):
        value = params.get(key)
        if value not in (None, ""):
            parts.append(f"{key}={value}")
    return " ".join(parts)


def _ini(top: Path, server_dsn: str, port: int, mode: str, pool_size: int) -> str:
    return f"""\
[databases]
* = {_server_entry(server_dsn)}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {top / "userlist.txt"}
admin_users = postgres
pool_mode = {mode}
default_pool_size = {pool_size}
max_client_conn = 2000
server_reset_query =
ignore_startup_parameters = extra_float_digits,options
logfile = {top / "pgbouncer.log"}
pidfile = {top / "pgbouncer.pid"}
"""


@contextmanager
def pgbouncer(
    server_dsn: str,
    *,
    mode: str = "transaction",
    pool_size: int = 20,
    users: tuple[str, ...] = ("postgres",),
) -> Iterator[str]:
    """Start PgBouncer in front of ``server_dsn``; yield the DSN that reaches
    the same database through it (stopped and removed on exit)."""
    if not Path(BINARY).exists():
        raise RuntimeError(
            f"no PgBouncer at {BINARY}: install Debian's pgbouncer package "
            "(or set PGQUEUE_TEST_PGBOUNCER_BIN)"
        )
    user = run_as()
    top = Path(tempfile.mkdtemp(prefix="pgqueue-bouncer-"))
    top.chmod(0o755)
    (top / "userlist.txt").write_text("".join(f'"{u}" ""\n' for u in users))
    if user:
        shutil.chown(top, user=SERVER_USER)
    port = _free_port()
    ini = top / "pgbouncer.ini"
    ini.write_text(_ini(top, server_dsn, port, mode, pool_size))
    params = conninfo_to_dict(server_dsn)
    dsn = make_conninfo(
        "",
        host="127.0.0.1",
        port=port,
        user=params.get("user") or "postgres",
        dbname=params.get("dbname") or "postgres",
    )
    process = subprocess.Popen(
        [BINARY, "--quiet", str(ini)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **user
    )
    try:
        _wait_until_ready(process, dsn, top)
        yield dsn
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(top, ignore_errors=True)


def _wait_until_ready(process: subprocess.Popen[bytes], dsn: str, top: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.poll() is not None:
            err = process.stderr.read().decode() if process.stderr else ""
            log = (top / "pgbouncer.log").read_text() if (top / "pgbouncer.log").exists() else ""
            raise RuntimeError(f"pgbouncer exited with {process.returncode}: {err}{log}")
        try:
            with psycopg.connect(dsn, connect_timeout=2, prepare_threshold=None) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # a start-up poll, not a test's synchronisation
