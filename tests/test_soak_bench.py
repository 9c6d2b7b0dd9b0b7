"""``benchmarks/soak.py --smoke`` runs end to end on a real server (no timing is judged)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "soak.py"


def test_soak_smoke_reports_each_phase_with_the_snapshot_held_and_cleans_up(dsn: str) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--json", "--dsn", dsn],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    phases = {p["name"]: p for p in report["phases"]}
    assert list(phases) == ["before", "held", "after"]
    for phase in phases.values():
        assert phase["claims"] > 0 and phase["claim_p99_ms"] >= phase["claim_p50_ms"] > 0
        assert phase["buffers_per_claim"] is not None and phase["buffers_per_claim"] > 0
    # The snapshot was taken and released inside the run, in the middle half.
    taken, released = report["held"]
    duration = report["minutes"] * 60
    assert duration / 4 <= taken < released <= duration
    # Every job enqueued was handled by the end (the worker kept up, or caught up).
    last = report["samples"][-1]
    assert last["handled"] <= last["enqueued"] and last["enqueued"] > 0
    assert set(report["verdict"]) == {"p99_ratio", "rate_ratio"}
    with psycopg.connect(dsn) as conn:
        left = conn.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'soak_%'")
        assert left.fetchone() == (0,)
