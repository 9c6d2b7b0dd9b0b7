"""``manage.py pgqueue_worker``: run the project's pgqueue handlers and Django tasks."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from .....aio.worker import AsyncWorker
from .....cli.errors import UsageError
from .....cli.flags import CommandFlags, add_arguments
from .....cli.worker import run_worker_command
from .....sync.worker import Worker
from ... import close_queue
from ...worker import build_worker, set_up_and_build_worker

DJANGO_MIGRATE = "manage.py pgqueue_migrate"


class Command(BaseCommand):
    """Run a `pgqueue.Worker` on the queue of ``PGQUEUE`` until SIGINT or SIGTERM."""

    help = (
        "Run a pgqueue worker: the handlers of PGQUEUE['HANDLERS'], of @handler in each "
        "app's jobs module, and the tasks of every PgQueueBackend in TASKS. Takes every "
        "flag of `pgqueue worker` but TARGET, --dsn and --trio."
    )

    # Set when run by manage.py, which ends its process next, rather than by call_command.
    from_command_line = False

    def add_arguments(self, parser: CommandParser) -> None:
        add_arguments(parser)

    def run_from_argv(self, argv: list[str]) -> None:
        self.from_command_line = True
        super().run_from_argv(argv)

    def handle(self, *args: Any, **options: Any) -> None:
        flags = CommandFlags.from_parsed(options)
        # A worker process sets Django up first, from the settings module its environment names.
        build = set_up_and_build_worker if flags.processes is not None else build_worker

        ran = "pgqueue worker processes"

        def started(worker: Worker | AsyncWorker) -> None:
            nonlocal ran
            ran = f"pgqueue worker {worker.name}"
            kinds = ", ".join(worker.handlers.kinds()) or "none"
            self.stdout.write(f"{ran} on {worker.queue.table}: {kinds}")

        try:
            status = run_worker_command(
                build,
                flags,
                what="the project's worker",
                migrate=DJANGO_MIGRATE,
                started=started,
                exit_if_stuck=self.from_command_line,
            )
        except UsageError as exc:
            raise CommandError(str(exc), returncode=2) from exc
        finally:
            close_queue()  # the worker closed it: the next get_queue() builds a new one
        if status != 0:
            raise SystemExit(status)  # the reason is logged already, in one line
        self.stdout.write(f"{ran} stopped")
