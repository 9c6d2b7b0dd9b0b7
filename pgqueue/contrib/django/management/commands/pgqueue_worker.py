"""``manage.py pgqueue_worker``: run the project's pgqueue handlers and Django tasks."""

from __future__ import annotations

import argparse
import functools
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from .....cli.argtypes import positive_int
from .....cli.errors import UsageError
from .....cli.processes import supervise
from ...worker import build_worker, set_up_and_build_worker


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one name, comma-separated")
    return names


class Command(BaseCommand):
    """Run a `pgqueue.Worker` on the queue of ``PGQUEUE`` until SIGINT or SIGTERM."""

    help = (
        "Run a pgqueue worker: the handlers of PGQUEUE['HANDLERS'], of @handler in each "
        "app's jobs module, and the tasks of every PgQueueBackend in TASKS."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queues", type=_names, help="serve only these queues (comma-separated)"
        )
        parser.add_argument("--kinds", type=_names, help="run only these kinds (comma-separated)")
        parser.add_argument("--concurrency", type=int, help="handlers running at once")
        parser.add_argument(
            "--processes",
            type=positive_int,
            metavar="N",
            help="run N worker processes under one supervisor (for CPU-bound handlers)",
        )
        parser.add_argument(
            "--max-jobs-per-child",
            type=positive_int,
            metavar="M",
            help="with --processes: replace a worker process after it finished M jobs",
        )
        parser.add_argument(
            "--until-empty",
            action="store_true",
            help="stop once no job is ready or running (scripts, tests)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        overrides = {
            key: options[key]
            for key in ("queues", "kinds", "concurrency")
            if options.get(key) is not None
        }
        if options["processes"] is not None:
            self._supervise(overrides, options)
            return
        if options["max_jobs_per_child"] is not None:
            raise CommandError("--max-jobs-per-child needs --processes")
        try:
            worker = build_worker(**overrides)
        except (TypeError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        kinds = ", ".join(worker.handlers.kinds()) or "none"
        self.stdout.write(f"pgqueue worker {worker.name} on {worker.queue.table}: {kinds}")
        worker.run(until_empty=options["until_empty"])
        self.stdout.write(f"pgqueue worker {worker.name} stopped")

    def _supervise(self, overrides: dict[str, Any], options: dict[str, Any]) -> None:
        build = functools.partial(set_up_and_build_worker, **overrides)
        try:
            status = supervise(build, processes=options["processes"],
                               max_jobs_per_child=options["max_jobs_per_child"],
                               until_empty=options["until_empty"])  # fmt: skip
        except (TypeError, ValueError, UsageError) as exc:
            raise CommandError(str(exc)) from exc
        if status != 0:
            raise CommandError("a worker process could not set up its worker (see its log)")
        self.stdout.write("pgqueue worker processes stopped")
