"""An earlier release of pgqueue, from this repository's git history, in a venv of its own.

`release_python(commit)` exports the commit's tree (``git archive``) and
installs it, with its own dependencies from PyPI, into a new venv; it
returns that venv's interpreter. The venv is kept under
``$PGQUEUE_TEST_RELEASES`` (default ``~/.cache/pgqueue-tests/releases``),
one directory per commit, so that only the first run pays for it. A clone
without that commit (a shallow one) fetches it from ``origin`` first.

Its processes run isolated (``python -I``): neither ``PYTHONPATH`` nor the
current directory can put this checkout's pgqueue in their way.
"""

from __future__ import annotations

import fcntl
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class ReleaseUnavailable(Exception):
    """The commit cannot be had here: no git, no history, no origin."""


def cache_directory() -> Path:
    configured = os.environ.get("PGQUEUE_TEST_RELEASES")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "pgqueue-tests" / "releases"


def clean_environment() -> dict[str, str]:
    """The environment without what would make Python import this checkout."""
    return {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, check=False)


def export(commit: str, into: Path) -> None:
    """The commit's tree, written under ``into``."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        raise ReleaseUnavailable(f"{ROOT} is not a git checkout: commit {commit} is not at hand")
    if _git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        fetched = _git("fetch", "--quiet", "--depth=1", "origin", commit)
        if fetched.returncode != 0:
            raise ReleaseUnavailable(
                f"commit {commit} is not in this clone and origin did not give it: "
                + fetched.stderr.decode(errors="replace").strip()
            )
    archive = _git("archive", "--format=tar", commit)
    if archive.returncode != 0:
        raise ReleaseUnavailable(archive.stderr.decode(errors="replace").strip())
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")


def _install(source: Path, venv: Path) -> None:
    env = clean_environment() | {"PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    uv = shutil.which("uv")
    python = str(venv / "bin" / "python")
    if uv:
        commands = [
            [uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
            [uv, "pip", "install", "--quiet", "--python", python, str(source)],
        ]
    else:
        commands = [
            [sys.executable, "-m", "venv", str(venv)],
            [python, "-m", "pip", "install", "--quiet", str(source)],
        ]
    for command in commands:
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")


def release_python(commit: str) -> Path:
    """The interpreter of a venv with pgqueue at ``commit`` installed: built once, then kept."""
    cache = cache_directory()
    cache.mkdir(parents=True, exist_ok=True)
    home = cache / commit
    python = home / "venv" / "bin" / "python"
    with (cache / f"{commit}.lock").open("w") as lock:
        # One builder at a time (pytest-xdist workers, parallel sessions).
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / "complete").exists():
            return python
        shutil.rmtree(home, ignore_errors=True)
        (home / "source").mkdir(parents=True)
        export(commit, home / "source")
        _install(home / "source", home / "venv")
        (home / "complete").write_text(commit + "\n")
    return python
