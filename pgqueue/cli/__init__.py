"""The ``pgqueue`` command: run workers, and operate a queue from a shell.

    pgqueue migrate                                     # create or upgrade the schema
    pgqueue grant app_role                              # the runtime's grants (--read-only)
    pgqueue enqueue send_receipt '{"order_id": 42}' --delay 15m
    pgqueue stats                                       # counts, oldest wait, expired leases
    pgqueue jobs list --status running --kind send_receipt
    pgqueue jobs show 17
    pgqueue dead list
    pgqueue dead retry 17 18                            # or: --all [--kind K]
    pgqueue dead purge --older-than 30d
    pgqueue history prune --older-than 90d
    pgqueue queues list                                 # paused or not, jobs by status
    pgqueue queues pause mail                           # or: resume mail
    pgqueue cron list                                   # schedules: last and next tick
    pgqueue cron trigger nightly_report                 # or: pause NAME, resume NAME
    pgqueue cancel 17 18                                # removed, or (running) asked to stop
    pgqueue result 17                                   # its outcome, and value or error
    pgqueue limits                                      # or: limits set api 5
    pgqueue reap --visibility-timeout 10m
    pgqueue worker myapp.jobs:worker                    # until SIGINT or SIGTERM
    pgqueue worker myapp.jobs:async_worker --trio       # an AsyncWorker on trio
    pgqueue worker myapp.jobs:worker --processes 4      # four processes, one supervisor
    pgqueue check myapp.jobs:worker                     # jobs this code cannot run (deploys)
    pgqueue bench                                       # throughput, beside the seed design
    pgqueue dashboard                                   # the web dashboard, on 127.0.0.1:8787
    pgqueue embedded start                              # a local server; prints its DSN

Every operator subcommand (all but ``worker`` and ``bench``) takes ``--dsn``
(default ``$PGQUEUE_DSN``), ``--table`` (default ``$PGQUEUE_TABLE``, else
``pgqueue_jobs``) and ``--json`` (one JSON document on stdout instead of
aligned text), after the subcommand. A DURATION is ``90`` (seconds), ``90s``,
``15m``, ``12h``, ``7d`` or a combination in that order such as ``1h30m``.

``worker TARGET`` names a `pgqueue.Worker` or `pgqueue.AsyncWorker` as
``module:attribute`` (the attribute may be dotted); the current directory is
put on ``sys.path`` first, so a module of the project the command runs in can
be named. Its ``--dsn`` (default ``$PGQUEUE_DSN``) and a flag for each of the
worker's settings (``--concurrency``, ``--batch-size``, ``--kinds``, ``--queues``,
``--poll-interval``...) override the worker's own: the command then runs a copy
of the worker, with the same handlers and other settings, on a queue of the
same table.

Exit status:

* 0: done (also when there was nothing to do: no job to reap, retry or purge,
  and when the reader of the output stopped reading, as ``| head`` does);
  for ``worker``, the worker stopped (a first SIGINT or SIGTERM stops it
  gracefully; see `pgqueue.AsyncWorker`).
* 1: an operational failure, reported in one line on stderr: the database
  cannot be reached or refused a statement, its schema is newer than this
  pgqueue (`pgqueue.SchemaTooNew`) or the table is not a queue's, ``jobs
  show`` found no such job, ``dead retry ID...`` named a job that is not dead
  (the dead ones named are still retried), ``enqueue --on-duplicate raise``
  found its unique key taken, ``cron pause|resume|trigger`` named no schedule
  or ``cron trigger`` found an overlap=False schedule's job still pending or
  running, ``cancel ID...`` named a job not in the queue (the others are
  cancelled), ``result ID`` found neither the job nor a result kept, ``check``
  found jobs that the code cannot run, or the worker failed.
* 2: bad arguments (no DSN, a malformed DURATION, PAYLOAD or date, a target
  that cannot be loaded...): a usage message on stderr, nothing written.
* 130: interrupted by SIGINT before a clean stop.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from . import (
    app,
    bench,
    check,
    control,
    cron,
    dashboard,
    dead,
    embedded,
    enqueue,
    jobs,
    queues,
    schema,
    upkeep,
    worker,
)
from .argtypes import parse_duration
from .errors import OperationFailed, UsageError

__all__ = ["OperationFailed", "UsageError", "build_parser", "main", "parse_duration"]

# The groups of subcommands, in the order `pgqueue --help` lists them. Each
# module owns its commands' parsers and what they run, and adds them with
# `add_commands(commands)` (made with `pgqueue.cli.parsers`).
GROUPS = (
    schema,  # migrate, grant
    enqueue,  # enqueue
    jobs,  # stats, jobs list|show
    dead,  # dead list|retry|purge
    queues,  # queues list|pause|resume
    upkeep,  # history prune, reap
    cron,  # cron list|pause|resume|trigger
    control,  # cancel, result, limits
    worker,  # worker TARGET
    bench,  # bench
    dashboard,  # dashboard
    embedded,  # embedded start|dsn|stop
    check,  # check TARGET
)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: every subcommand and its options."""
    return app.build_parser(GROUPS)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``pgqueue`` command; return its exit status."""
    return app.main(build_parser(), argv)
