"""``benchmarks/workload.py --smoke`` runs end to end on a real server (no timing is judged)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "workload.py"


def test_workload_smoke_reports_its_cases_for_each_backend_and_handler_and_cleans_up(
    dsn: str,
) -> None:
    # sync (a Worker) and trio (an AsyncWorker, with both kinds of handler)
    # cover both workers; a drain, the burst producer and a limit cover the
    # script's paths (mixed and limit are drains too); the peers need a venv
    # of their own and stay out.
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--smoke",
            "--no-peers",
            "--repeat",
            "1",
            "--json",
            "--backends",
            "sync,trio",
            "--cases",
            "uniform,burst,limit-trivial,cpu",
            "--dsn",
            dsn,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    ran = set(report["cases"])
    # The CPU case needs `pgqueue worker --processes`; without it, a note says so.
    assert ran - {"cpu"} == {"uniform", "burst", "limit-trivial"}
    assert ("cpu" in ran) != ("cpu" in report["skipped"])
    if "cpu" in ran:
        processes = [r["contender"] for r in report["cases"]["cpu"]["results"]]
        assert processes == ["pgqueue --processes 1", "pgqueue --processes 2"]
    for name in ran - {"cpu"}:
        results = report["cases"][name]["results"]
        assert [(r["contender"], r["handler"]) for r in results] == [
            ("pgqueue sync", "def"),
            ("pgqueue trio", "def"),
            ("pgqueue trio", "async"),
        ]
        for r in results:
            assert len(r["runs"]) == 1 and r["jobs_per_s"] > 0 and r["peak"] >= 1
            if name == "burst":
                assert {"p50_ms", "p99_ms", "max_ms"} <= set(r)
                assert len(r["runs"][0]["latencies_ms"]) == r["runs"][0]["jobs"]
            elif name == "limit-trivial":
                assert r["efficiency"] is None  # trivial jobs have no ideal rate
            else:
                assert r["efficiency"] > 0
    with psycopg.connect(dsn) as conn:
        left = conn.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'workload_%'")
        assert left.fetchone() == (0,)
