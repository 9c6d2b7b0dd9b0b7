"""`pgqueue bench`'s drain at two commits, in interleaved pairs: did a change cost speed?

Each commit is checked out into a temporary git worktree, and ``pgqueue
bench --repeat 1`` of each runs in turns (old, new; then new, old; ...)
against one server, started once (embedded) unless ``--dsn`` is given, so a
noisy moment of a shared machine hurts both alike. Every run enqueues and
drains ``--jobs`` trivial jobs on each ``--backend`` (default: asyncio and
sync), and the seed design's and the ceiling's loops beside them, as
``pgqueue bench`` does.

Printed for each backend: the median jobs/s of each commit, their ratio,
and the ratio within each pair, sorted (their spread is the noise). The
ratio to ``bench``'s ceiling is not compared: the ceiling runs each
commit's own claim statement.

    python benchmarks/ab_drain.py 5a64d32 HEAD --pairs 10

Run it from a clone of the repository, on a machine otherwise idle.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from pgqueue.embedded import dsn_or_embedded


def worktree(stack: ExitStack, rev: str) -> Path:
    """A checkout of ``rev`` in a temporary directory, removed on exit."""
    path = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pgqueue-ab-"))) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(path), rev], check=True)
    stack.callback(subprocess.run, ["git", "worktree", "remove", "--force", str(path)])
    return path


def bench(tree: Path, dsn: str, backends: list[str], jobs: int) -> dict[str, float]:
    """One ``pgqueue bench`` run of the code in ``tree``: jobs/s by backend."""
    args = [sys.executable, "-m", "pgqueue", "bench", "--dsn", dsn, "--repeat", "1", "--json"]
    args += ["--jobs", str(jobs)]
    for backend in backends:
        args += ["--backend", backend]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True, cwd=tree)
    results = json.loads(out.stdout)["results"]
    return {backend: results[backend]["jobs_per_s"] for backend in backends}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", help="the commit before the change")
    parser.add_argument("new", help="the commit after it")
    parser.add_argument("--pairs", type=int, default=10, help="runs of each commit (default 10)")
    parser.add_argument("--jobs", type=int, default=50_000, help="jobs per run (default 50,000)")
    parser.add_argument("--backend", action="append", choices=("sync", "asyncio", "trio"))
    parser.add_argument("--dsn", default=os.environ.get("PGQUEUE_DSN"))
    options = parser.parse_args()
    backends = options.backend or ["asyncio", "sync"]

    rates: dict[str, dict[str, list[float]]] = {
        side: {b: [] for b in backends} for side in ("old", "new")
    }
    with ExitStack() as stack:
        trees = {"old": worktree(stack, options.old), "new": worktree(stack, options.new)}
        dsn = stack.enter_context(dsn_or_embedded(options.dsn))
        for pair in range(options.pairs):
            for side in ("old", "new") if pair % 2 == 0 else ("new", "old"):
                for backend, rate in bench(trees[side], dsn, backends, options.jobs).items():
                    rates[side][backend].append(rate)
            print(f"pair {pair + 1}/{options.pairs}: " + ", ".join(
                f"{b} {rates['old'][b][-1]:,.0f} -> {rates['new'][b][-1]:,.0f}" for b in backends
            ), flush=True)  # fmt: skip

    print(f"\n{options.old} -> {options.new}, {options.pairs} pairs of {options.jobs:,} jobs")
    for backend in backends:
        old, new = rates["old"][backend], rates["new"][backend]
        pairs = sorted(n / o for o, n in zip(old, new, strict=True))
        before, after = statistics.median(old), statistics.median(new)
        print(
            f"{backend:8} median jobs/s {before:9,.0f} -> {after:9,.0f}  ratio {after / before:.3f}"
            f"  (pair ratios {', '.join(f'{r:.2f}' for r in pairs)})"
        )


if __name__ == "__main__":
    main()
