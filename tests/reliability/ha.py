"""A primary and a streaming standby, from PostgreSQL server binaries on disk (Debian's 15).

`ReplicatedPair` makes both in a new directory, on free TCP ports of
127.0.0.1: ``initdb`` and start the primary, ``pg_basebackup -R`` the
standby from it and start it, and wait until the primary streams to it
synchronously (``synchronous_standby_names = '*'``, set on the primary's
command line only: the promoted standby then commits alone). An
acknowledged commit is thus on both servers, so that what a failover loses
is pgqueue's doing, not the replication's. `kill_primary` takes the
primary down as a crashed machine would (``SIGKILL`` to the postmaster and
every backend at once, no shutdown checkpoint, connections cut), and
`promote` makes the standby the primary (``pg_ctl promote``).

As root, the servers run as the unprivileged user of `tests.servers`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from ..servers import SERVER_USER, run_as

# A liveness deadline for each step: it must happen at all, never quickly.
PATIENCE = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def running(pid: int) -> bool:
    """Whether ``pid`` is a process that runs (a zombie waits for no one here)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a postmaster's backends)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            # The fields after the command's name, which may hold spaces.
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


class ReplicatedPair:
    """A primary and its synchronous streaming standby, each on a port of 127.0.0.1."""

    def __init__(self, bin_dir: Path) -> None:
        self.bins = bin_dir
        self.as_user: dict[str, Any] = run_as()
        self.top = Path(tempfile.mkdtemp(prefix="pgqueue-ha-"))
        self.top.chmod(0o755)
        if self.as_user:
            shutil.chown(self.top, user=SERVER_USER)
        self.primary = self.top / "primary"
        self.standby = self.top / "standby"
        self.primary_port = free_port()
        self.standby_port = free_port()

    def dsn(self, port: int) -> str:
        return f"host=127.0.0.1 port={port} user=postgres dbname=postgres connect_timeout=5"

    @property
    def multi_host_dsn(self) -> str:
        """Both servers, the writable one wanted: what an application of a HA cluster uses."""
        return (
            f"host=127.0.0.1,127.0.0.1 port={self.primary_port},{self.standby_port}"
            " user=postgres dbname=postgres target_session_attrs=read-write connect_timeout=5"
        )

    def _run(self, *command: Any) -> None:
        done = subprocess.run(
            [str(c) for c in command], capture_output=True, text=True, check=False, **self.as_user
        )
        if done.returncode != 0:
            raise RuntimeError(f"{command[0]} failed:\n{done.stdout}\n{done.stderr}")

    def _start(self, data: Path, port: int, *settings: str) -> None:
        options = " ".join(
            [
                f"-c listen_addresses=127.0.0.1 -c port={port} -k {self.top}",
                "-c fsync=off -c max_connections=200",
                *settings,
            ]
        )
        self._run(self.bins / "pg_ctl", "-D", data, "-w", "-t", "120", "-l", data / "log",
                  "-o", options, "start")  # fmt: skip

    def start(self) -> None:
        self._run(self.bins / "initdb", "-D", self.primary, "-U", "postgres", "--auth=trust",
                  "-E", "UTF8")  # fmt: skip
        self._start(self.primary, self.primary_port, "-c synchronous_standby_names='*'")
        self._run(self.bins / "pg_basebackup", "-h", "127.0.0.1", "-p", self.primary_port,
                  "-U", "postgres", "-D", self.standby, "-R", "-X", "stream",
                  "--checkpoint=fast")  # fmt: skip
        self._start(self.standby, self.standby_port)
        self._wait_until("the standby streams synchronously", self._streams_synchronously)

    def _streams_synchronously(self) -> bool:
        with psycopg.connect(self.dsn(self.primary_port), autocommit=True) as conn:
            rows = conn.execute("SELECT sync_state FROM pg_stat_replication").fetchall()
        return rows == [("sync",)]

    def _wait_until(self, what: str, condition: Any) -> None:
        deadline = time.monotonic() + PATIENCE
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting until {what}")
            time.sleep(0.05)

    def postmaster_pid(self, data: Path) -> int:
        return int((data / "postmaster.pid").read_text().split()[0])

    def kill_primary(self) -> None:
        """SIGKILL the primary's postmaster and every backend at once, as a crash would."""
        pid = self.postmaster_pid(self.primary)
        os.kill(pid, signal.SIGSTOP)  # it forks no backend meanwhile
        doomed = [*children(pid), pid]
        for victim in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        self._wait_until(
            "the primary's processes are gone",
            lambda: not any(running(p) for p in doomed),
        )

    def promote(self) -> None:
        """The standby becomes the primary; returns once it accepts writes."""
        self._run(self.bins / "pg_ctl", "-D", self.standby, "-w", "-t", "120", "promote")

    def stop(self) -> None:
        for data in (self.standby, self.primary):
            if (data / "postmaster.pid").exists():
                subprocess.run(
                    [str(self.bins / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                    capture_output=True,
                    check=False,
                    **self.as_user,
                )
        shutil.rmtree(self.top, ignore_errors=True)
