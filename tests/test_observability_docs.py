"""The runnable examples of docs/observability.md run, each in a process and a database of its own.

A block is runnable when it reads ``os.environ["PGQUEUE_DSN"]``; it uses the
default table, so each run gets a fresh database, dropped afterwards.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "observability.md"


def runnable_blocks() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    return [b for b in blocks if 'os.environ["PGQUEUE_DSN"]' in b]


def run(dsn: str, cwd: Path, *args: str) -> list[str]:
    env = {**os.environ, "PGQUEUE_DSN": dsn}
    done = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def test_the_doc_has_two_runnable_examples() -> None:
    assert len(runnable_blocks()) == 2


def test_event_listener_example_prints_what_it_promises(
    empty_database: str, tmp_path: Path
) -> None:
    example = runnable_blocks()[0]
    (tmp_path / "events_example.py").write_text(example)
    lines = run(empty_database, tmp_path, "events_example.py")
    promised = re.search(r"^# prints: (.*)$", example, flags=re.MULTILINE)
    assert promised is not None
    assert lines[-1] == promised.group(1)
    # add's output and the dead job's report, in any order: the report comes
    # when the failure is decided, while the other handlers may still print.
    dead = "job 4 (divide) is dead: ZeroDivisionError: division by zero"
    assert sorted(lines[:-1]) == sorted(["1", "2", "3", dead])


def test_prometheus_example_exports_counters_and_gauges(
    empty_database: str, tmp_path: Path
) -> None:
    (tmp_path / "metrics_example.py").write_text(runnable_blocks()[1])
    # Imported rather than run as __main__: no HTTP server, no endless run().
    drive = """
from prometheus_client import REGISTRY
import metrics_example as ex

ex.queue.enqueue("send_receipt", {"order_id": 7})
ex.worker.run(until_empty=True)
labels = {"table": "pgqueue_jobs", "queue": "default", "kind": "send_receipt"}
print(REGISTRY.get_sample_value("pgqueue_jobs_total", {**labels, "event": "succeeded"}))
print(REGISTRY.get_sample_value("pgqueue_job_duration_seconds_count", labels))
print(REGISTRY.get_sample_value("pgqueue_queue_up", {"table": "pgqueue_jobs"}))
ex.queue.close()
"""
    lines = run(empty_database, tmp_path, "-c", drive)
    assert lines == ["receipt for order 7", "1.0", "1.0", "1.0"]
