"""The README's quick starts run as they stand: sync, asyncio and trio.

Each Python block of the two quick-start sections is written to a file and
run in a process of its own, with ``PGQUEUE_DSN`` naming a new, empty
database on the suite's server, as a reader who exported it would run them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    """The README's text from the heading ``## title`` to the next ``## ``."""
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.DOTALL)


QUICK_STARTS = {
    "sync": python_blocks(section("Quick start, sync"))[0],
    "asyncio": python_blocks(section("Quick start, async"))[0],
    "trio": python_blocks(section("Quick start, async"))[1],
}


def test_the_quick_starts_are_the_ones_named() -> None:
    assert "pgqueue.Queue(" in QUICK_STARTS["sync"]
    assert "asyncio.run(main())" in QUICK_STARTS["asyncio"]
    assert "trio.run(main)" in QUICK_STARTS["trio"]
    # The setup they need is in the README, not in the test.
    assert "export PGQUEUE_DSN=$(pgqueue embedded start)" in section("Quick start, sync")


@pytest.mark.parametrize("flavour", list(QUICK_STARTS))
def test_a_quick_start_runs_verbatim(empty_database: str, tmp_path: Path, flavour: str) -> None:
    script = tmp_path / "shop.py"
    script.write_text(QUICK_STARTS[flavour])
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "PGQUEUE_DSN": empty_database},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{flavour}:\n{done.stdout}{done.stderr}"
    assert done.stdout.splitlines() == ["receipt sent for order 1"]
    with psycopg.connect(empty_database) as conn:
        assert conn.execute("SELECT item FROM orders").fetchall() == [("teapot",)]
        # The worker ran the job and recorded its success: no job is left.
        assert conn.execute("SELECT count(*) FROM pgqueue_jobs").fetchone() == (0,)
