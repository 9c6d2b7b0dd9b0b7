"""``pgqueue migrate`` and ``pgqueue grant``: the queue's schema, and who may use it."""

from __future__ import annotations

import argparse
from typing import Any

from ..sync.queue import Queue
from .argtypes import role_name
from .errors import OperationFailed
from .operate import queue_command
from .output import emit


def add_commands(commands: Any) -> None:
    """``migrate`` and ``grant``."""
    migrate = queue_command(
        commands,
        "migrate",
        cmd_migrate,
        "create the queue's table or upgrade its schema; print the version",
        "Apply the schema migrations the table lacks (idempotent; one installer at a time). "
        "They only expand the schema: what the previous release's workers still use stays, "
        "listed as contract pending, until --contract. A table built by hand with the seed "
        "design's columns is adopted in place.",
    )
    migrate.add_argument(
        "--contract",
        action="store_true",
        help="also drop what only older releases used: once every process runs this pgqueue",
    )

    grant = queue_command(
        commands,
        "grant",
        cmd_grant,
        "grant a role what the application and its workers need on the queue",
        "Run as the queue's owner, after migrate: USAGE on the schema and the id sequence, "
        "SELECT, INSERT, UPDATE, DELETE on the queue's tables (SELECT, INSERT, DELETE on its "
        "history table, if any). With --read-only, USAGE and SELECT only (monitoring, a "
        "read-only dashboard). Prints the GRANT statements it ran.",
    )
    grant.add_argument(
        "role", type=role_name, metavar="ROLE", help="the login role (or group) to grant to"
    )
    grant.add_argument(
        "--read-only", action="store_true", help="SELECT only: for monitoring or a dashboard"
    )


def cmd_migrate(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue migrate [--contract]``: install or upgrade the schema (expand);
    with ``--contract``, also drop what only older releases used."""
    applied = queue.install()
    contracted = queue.contract() if args.contract else []
    pending = queue.pending_contract()
    version = queue.schema_version()
    if applied:
        done = "applied " + ", ".join(str(v) for v in applied)
        lines = [f"{queue.table}: schema at version {version} ({done})"]
    else:
        lines = [f"{queue.table}: schema at version {version}, up to date"]
    if contracted:
        lines.append("contracted " + ", ".join(str(v) for v in contracted))
    elif args.contract:
        lines.append("nothing to contract")
    if pending:
        lines.append(
            "contract pending (run `pgqueue migrate --contract` once every process"
            " runs this pgqueue):"
        )
        lines += [f"  {v}: drop {drops}" for v, drops in pending.items()]
    document = {
        "table": queue.table,
        "version": version,
        "applied": applied,
        "contracted": contracted,
        "contract_pending": [{"version": v, "drops": d} for v, d in pending.items()],
    }
    emit(args, document, "\n".join(lines))
    return 0


def cmd_grant(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue grant ROLE``: the runtime's grants (or a reader's) on the queue."""
    try:
        statements = queue.grant(args.role, read_only=args.read_only)
    except ValueError as exc:  # the table is not installed
        raise OperationFailed(str(exc)) from None
    what = "read-only" if args.read_only else "runtime"
    text = "\n".join([f"{queue.table}: {what} grants to {args.role}:", *statements])
    emit(args, {"table": queue.table, "role": args.role, "read_only": args.read_only,
                "statements": statements}, text)  # fmt: skip
    return 0
