"""``pgqueue bench`` runs end to end on a real server (tiny sizes: no timing is judged)."""

from __future__ import annotations

import json
import subprocess
import sys

import psycopg


def bench(*args: str, python_prelude: str = "") -> subprocess.CompletedProcess[str]:
    """Run ``pgqueue bench``; ``python_prelude`` runs first in the same interpreter."""
    command = f"{python_prelude}\nimport sys\nfrom pgqueue.cli import main\nsys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", command, "bench", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_bench_reports_every_backend_beside_the_seed_design_and_cleans_up(dsn: str) -> None:
    done = bench("--dsn", dsn, "--jobs", "300", "--repeat", "2", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert set(report["results"]) == {"seed", "sync", "asyncio", "trio", "ceiling"}
    assert report["skipped"] == {}
    for result in report["results"].values():
        assert len(result["runs"]) == 2
        assert result["jobs_per_s"] > 0 and result["drain_s"] > 0
        assert result["ratio_to_ceiling"] > 0
    assert report["results"]["seed"]["ratio_to_seed"] == 1.0
    assert report["results"]["ceiling"]["ratio_to_ceiling"] == 1.0
    with psycopg.connect(dsn) as conn:
        left = conn.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'bench_%'")
        assert left.fetchone() == (0,)


def test_bench_prints_a_table_with_both_ratios_for_one_backend_and_the_ceiling(dsn: str) -> None:
    done = bench("--dsn", dsn, "--jobs", "200", "--repeat", "1", "--backend", "asyncio")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("backend"))
    assert lines[header].split()[-7:] == ["vs", "seed", "vs", "ceiling", "WAL", "B/job",
                                          "commits/job"]  # fmt: skip
    table = lines[header + 1 : lines.index("", header)]
    rows = {cells[0]: cells for cells in map(str.split, table)}
    assert list(rows) == ["seed", "asyncio", "ceiling"]
    for cells in rows.values():
        assert cells[-4].endswith("x") and cells[-3].endswith("x")
        # Every job wrote WAL (its row, then its deletion), and some commit carried it.
        assert int(cells[-2].replace(",", "")) > 0 and float(cells[-1]) > 0
    assert rows["seed"][-4] == "1.0x" and rows["ceiling"][-3] == "1.00x"
    assert "executemany" in done.stdout


def test_a_backend_whose_package_is_missing_is_skipped_with_a_one_line_note(dsn: str) -> None:
    # None in sys.modules: `import trio` raises ImportError, as on a venv without it.
    no_trio = "import sys\nsys.modules['trio'] = None"
    done = bench("--dsn", dsn, "--jobs", "200", "--repeat", "1", "--json", python_prelude=no_trio)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    notes = [line for line in done.stderr.splitlines() if "trio" in line]
    assert notes == ["trio: skipped, the trio package is not installed (pip install trio)"]
    report = json.loads(done.stdout)
    assert set(report["results"]) == {"seed", "sync", "asyncio", "ceiling"}
    assert report["skipped"] == {"trio": "the trio package is not installed (pip install trio)"}


def test_bench_refuses_bad_sizes_with_a_usage_message() -> None:
    done = bench("--jobs", "0")
    assert done.returncode == 2
    assert "at least 1" in done.stderr and "Traceback" not in done.stderr
