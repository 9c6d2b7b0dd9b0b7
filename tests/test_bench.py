"""``pgqueue bench`` runs end to end on a real server (tiny sizes: no timing is judged)."""

from __future__ import annotations

import json
import subprocess
import sys

import psycopg


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pgqueue", "bench", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_bench_reports_every_backend_beside_the_seed_design_and_cleans_up(dsn: str) -> None:
    done = bench("--dsn", dsn, "--jobs", "300", "--repeat", "2", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert set(report["results"]) == {"seed", "sync", "asyncio", "trio"}
    for result in report["results"].values():
        assert len(result["runs"]) == 2
        assert result["jobs_per_s"] > 0 and result["drain_s"] > 0
    assert report["results"]["seed"]["ratio_to_seed"] == 1.0
    with psycopg.connect(dsn) as conn:
        left = conn.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'bench_%'")
        assert left.fetchone() == (0,)


def test_bench_prints_a_table_with_the_ratio_for_one_backend(dsn: str) -> None:
    done = bench("--dsn", dsn, "--jobs", "200", "--repeat", "1", "--backend", "asyncio")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("seed") and line.endswith("1.0x") for line in lines)
    assert any(line.startswith("asyncio") and line.endswith("x") for line in lines)
    assert "executemany" in done.stdout


def test_bench_refuses_bad_sizes_with_a_usage_message() -> None:
    done = bench("--jobs", "0")
    assert done.returncode == 2
    assert "at least 1" in done.stderr and "Traceback" not in done.stderr
