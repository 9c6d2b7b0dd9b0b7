"""``pgqueue embedded start|dsn|stop``: a local server that outlives one command.

Each step runs the installed command in a process of its own, as a user
in several shells would.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg

PATIENCE = 120.0  # seconds: a liveness deadline for each command, never a performance claim


def pgqueue_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgqueue", *args], capture_output=True,
                          text=True, timeout=PATIENCE, check=False)  # fmt: skip


def test_a_server_started_by_one_command_serves_the_next_until_stopped(tmp_path: Path) -> None:
    where = str(tmp_path / "server")
    started = pgqueue_command("embedded", "start", "--dir", where)
    try:
        assert started.returncode == 0, started.stderr
        dsn = started.stdout.strip()
        shown = pgqueue_command("embedded", "dsn", "--dir", where)
        assert (shown.returncode, shown.stdout.strip()) == (0, dsn)
        migrated = pgqueue_command("migrate", "--dsn", dsn)
        assert migrated.returncode == 0, migrated.stderr
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT to_regclass('pgqueue_jobs') IS NOT NULL").fetchone()
        again = pgqueue_command("embedded", "start", "--dir", where)  # already running
        assert (again.returncode, again.stdout.strip()) == (0, dsn)
    finally:
        stopped = pgqueue_command("embedded", "stop", "--dir", where, "--delete")
    assert stopped.returncode == 0, stopped.stderr
    assert not Path(where).exists()
    gone = pgqueue_command("embedded", "dsn", "--dir", where)
    assert gone.returncode == 1 and "no embedded server runs" in gone.stderr
    assert "Traceback" not in gone.stderr
