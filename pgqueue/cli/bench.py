"""``pgqueue bench``: enqueue and drain throughput, beside the seed design (`pgqueue.bench`)."""

from __future__ import annotations

import argparse
from typing import Any

from .. import bench as pgqueue_bench
from .errors import UsageError
from .parsers import leaf

__all__ = ["add_commands", "run_bench"]


def add_commands(commands: Any) -> None:
    """``bench``, with the options `pgqueue.bench` takes."""
    help = "measure enqueue and drain throughput beside the seed design"
    bench = leaf(commands, "bench", run_bench, help, pgqueue_bench.__doc__, raw_description=True)
    pgqueue_bench.add_arguments(bench)


def run_bench(args: argparse.Namespace) -> int:
    """``pgqueue bench``."""
    if min(args.jobs, args.repeat, args.concurrency, args.batch_size) < 1:
        raise UsageError("--jobs, --repeat, --concurrency and --batch-size must be at least 1")
    return pgqueue_bench.run(args)
