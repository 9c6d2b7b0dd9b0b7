"""The flags of every worker command, from one table.

``pgqueue worker TARGET``, ``flask pgqueue worker`` and ``manage.py
pgqueue_worker`` take the same flags, spelled the same: each worker
setting (`WORKER_SETTINGS`, the fields of `pgqueue.core.worker.WorkerSettings`)
as its name with dashes, and the command's own options (``--processes``,
``--until-empty``, ``--metrics-port``...). The table is added to argparse
(`add_arguments`: ``pgqueue`` and Django) and to click (`click_options`:
Flask); what they parse becomes one `CommandFlags`, which
`pgqueue.cli.worker.run_worker_command` runs. Only ``pgqueue worker`` takes
a ``TARGET``, ``--dsn`` and ``--trio``: the frameworks' commands build
their worker from the app's own configuration (its DSN included), and it
is a `pgqueue.Worker`, which runs its plain-function handlers on threads,
not on trio.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .argtypes import kind_list, port, positive_duration, positive_int, queue_list, worker_name
from .probes import HttpOptions

__all__ = [
    "COMMAND_FLAGS",
    "FLAGS",
    "LOG_LEVELS",
    "SETTING_FLAGS",
    "WORKER_SETTINGS",
    "CommandFlags",
    "Flag",
    "add_arguments",
    "click_options",
]

F = TypeVar("F", bound=Callable[..., Any])

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass(frozen=True)
class Flag:
    """One flag of the worker commands: ``--`` and its name with dashes."""

    name: str
    """The setting or option it sets, e.g. ``batch_size`` (``--batch-size``)."""
    help: str
    type: Callable[[str], Any] | None = None
    """Checks and converts the text given (raises `argparse.ArgumentTypeError`)."""
    metavar: str | None = None
    default: Any = None
    switch: bool = False
    """A flag without a value: True when given."""
    choices: tuple[str, ...] | None = None

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")


# The worker's settings, each overriding the target's own (None: not given).
SETTING_FLAGS = (
    Flag("concurrency", "handlers run at a time", positive_int, "N"),
    Flag("batch_size", "jobs claimed at a time at most", positive_int, "N"),
    Flag("kinds", "handle only these kinds of job (comma-separated)", kind_list, "KIND[,KIND...]"),
    Flag(
        "queues",
        "serve only these queues (comma-separated; default: the worker's own, else all)",
        queue_list,
        "QUEUE[,QUEUE...]",
    ),
    Flag(
        "poll_interval",
        "the longest an idle worker waits before it looks for jobs",
        positive_duration,
        "DURATION",
    ),
    Flag("job_timeout", "a job still running after this long fails", positive_duration, "DURATION"),
    Flag(
        "visibility_timeout",
        "a job's lease: a dead worker's jobs come back after it",
        positive_duration,
        "DURATION",
    ),
    Flag(
        "grace_period",
        "on a stop, how long running jobs may finish",
        positive_duration,
        "DURATION",
    ),
    Flag("call_timeout", "the longest any database call may take", positive_duration, "DURATION"),
    Flag(
        "claim_bytes", "the most payload bytes one claim brings in (memory)", positive_int, "BYTES"
    ),
    Flag("name", "the worker's name, in locked_by", worker_name, "NAME"),
    Flag(
        "listen_conninfo",
        "LISTEN on this server connection (a transaction pooler stands in front)",
        None,
        "DSN",
    ),
)

WORKER_SETTINGS = tuple(flag.name for flag in SETTING_FLAGS)
"""The worker's settings the commands take as flags: every one of them."""

# The command's own options: how it runs the worker, and what it serves beside.
COMMAND_FLAGS = (
    Flag("until_empty", "exit 0 once no job is ready or running", switch=True, default=False),
    Flag(
        "processes",
        "run N worker processes under one supervisor (for CPU-bound handlers): "
        "a process that dies is restarted, SIGINT and SIGTERM stop them all",
        positive_int,
        "N",
    ),
    Flag(
        "max_jobs_per_child",
        "with --processes: replace a worker process after it finished M jobs",
        positive_int,
        "M",
    ),
    Flag(
        "metrics_port",
        "serve Prometheus metrics on this port (every interface unless --metrics-host): "
        "the worker's events and the queue's stats at /metrics (needs the prometheus extra)",
        port,
        "PORT",
    ),
    Flag(
        "metrics_host",
        "with --metrics-port: the address to listen on, e.g. 127.0.0.1 "
        "(default: 0.0.0.0, every interface)",
        None,
        "HOST",
        default="0.0.0.0",
    ),
    Flag(
        "health_port",
        "serve health probes on this port: /livez (200 while the worker's event loop "
        "turns) and /readyz (200 while it reaches the database), else 503 with the reason; "
        "may be --metrics-port",
        port,
        "PORT",
    ),
    Flag(
        "health_host",
        "with --health-port: the address to listen on (default: 0.0.0.0, every interface)",
        None,
        "HOST",
        default="0.0.0.0",
    ),
    Flag(
        "log_level",
        "logging level (default: INFO); logs go to stderr",
        str.upper,
        "LEVEL",
        default="INFO",
        choices=LOG_LEVELS,
    ),
)

FLAGS = SETTING_FLAGS + COMMAND_FLAGS
"""Every flag that every worker command takes."""


@dataclass(frozen=True)
class CommandFlags:
    """What a worker command was given, whichever parser read it."""

    settings: dict[str, Any]
    """The worker settings given (None: keep the worker's own)."""
    until_empty: bool = False
    processes: int | None = None
    max_jobs_per_child: int | None = None
    http: HttpOptions = field(default_factory=HttpOptions)
    log_level: str = "INFO"
    trio: bool = False

    @classmethod
    def from_parsed(cls, values: Mapping[str, Any], *, trio: bool = False) -> CommandFlags:
        """From what a parser made of `FLAGS` (an argparse namespace's ``vars``,
        click's keyword arguments, Django's options)."""
        return cls(
            settings={name: values.get(name) for name in WORKER_SETTINGS},
            until_empty=bool(values.get("until_empty")),
            processes=values.get("processes"),
            max_jobs_per_child=values.get("max_jobs_per_child"),
            http=HttpOptions(
                metrics_port=values.get("metrics_port"),
                metrics_host=values.get("metrics_host") or "0.0.0.0",
                health_port=values.get("health_port"),
                health_host=values.get("health_host") or "0.0.0.0",
            ),
            log_level=values.get("log_level") or "INFO",
            trio=trio,
        )


def add_arguments(parser: argparse.ArgumentParser, flags: tuple[Flag, ...] = FLAGS) -> None:
    """Add ``flags`` to an argparse parser (``pgqueue worker``, ``manage.py pgqueue_worker``)."""
    for flag in flags:
        if flag.switch:
            parser.add_argument(flag.option, action="store_true", help=flag.help)
            continue
        parser.add_argument(
            flag.option,
            type=flag.type or str,
            metavar=flag.metavar,
            default=flag.default,
            choices=flag.choices,
            help=flag.help,
        )


def click_options(flags: tuple[Flag, ...] = FLAGS) -> Callable[[F], F]:
    """A decorator adding ``flags`` to a click command (``flask pgqueue worker``),
    each checked by the same function as in argparse."""
    import click

    def checked(flag: Flag) -> Callable[[Any], Any]:
        def convert(value: Any) -> Any:
            if not isinstance(value, str):
                return value
            try:
                checked = flag.type(value) if flag.type is not None else value
            except argparse.ArgumentTypeError as exc:
                raise click.BadParameter(str(exc)) from None
            if flag.choices is not None and checked not in flag.choices:
                raise click.BadParameter(f"{value!r} is not one of {', '.join(flag.choices)}")
            return checked

        convert.__name__ = (flag.metavar or flag.name).lower()
        return convert

    def decorate(command: F) -> F:
        for flag in reversed(flags):
            if flag.switch:
                option = click.option(flag.option, flag.name, is_flag=True, help=flag.help)
            else:
                option = click.option(
                    flag.option,
                    flag.name,
                    type=checked(flag),
                    default=flag.default,
                    metavar=flag.metavar,
                    help=flag.help,
                )
            command = option(command)
        return command

    return decorate
