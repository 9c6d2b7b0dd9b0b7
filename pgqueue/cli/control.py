"""``pgqueue cancel``, ``pgqueue result`` and ``pgqueue limits``: job control from a shell.

    pgqueue cancel 17 18          # waiting or dead: removed; running: asked to stop
    pgqueue result 17             # succeeded (its value), dead (its error), cancelled...
    pgqueue limits                # every limit key: its limit, running and waiting jobs
    pgqueue limits set api 5      # at most 5 jobs with limit_key="api" run at once
    pgqueue limits rate api 50    # ... and at most 50 of them start a second

``cancel`` exits 1 when an ID named is not in the queue (the others are
cancelled all the same); ``result`` exits 1 when the job is neither in the
queue nor has a result kept (see docs/cli.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..core.ops import LimitState
from ..core.results import JobResult
from ..sync.queue import Queue
from .argtypes import job_id, limit_key, non_negative_int
from .errors import OperationFailed, UsageError
from .operate import queue_command
from .output import emit, format_time, indent, plural, record_json, table_text

__all__ = ["add_commands"]


def add_commands(commands: Any) -> None:
    """``cancel``, ``result`` and ``limits``."""
    cancel = queue_command(
        commands,
        "cancel",
        cmd_cancel,
        "cancel jobs: remove waiting and dead ones, ask running ones to stop",
        "Cancel the jobs named: a pending or dead job is removed now; a running one is "
        "asked to stop, and its worker stops it (within a heartbeat). A cancelled job is "
        "never retried, returned by the reaper or marked dead. Exit 1 if an ID is not in "
        "the queue (it finished, or never existed); the others are cancelled all the same.",
    )
    cancel.add_argument("ids", type=job_id, nargs="+", metavar="ID")

    result = queue_command(
        commands,
        "result",
        cmd_result,
        "where a job stands: pending, running, or its kept outcome and value",
        "Print where a job stands without waiting: pending or running; dead with its "
        "error; or, for a job enqueued with a result ttl, succeeded with its handler's "
        "return value, or cancelled, until the ttl passes. Exit 1 if the job is not in "
        "the queue and left no result.",
    )
    result.add_argument("id", type=job_id, metavar="ID")

    limits = queue_command(
        commands,
        "limits",
        cmd_limits,
        "list limits, or set one: limits set KEY N | limits rate KEY PER_SECOND",
        "Without arguments (or with `list`), list every limit key in use or set: its "
        "limit, its running and waiting jobs, and its rate. `limits set KEY N` lets at most "
        "N jobs enqueued with that limit key run at once, over every worker (0 holds them "
        "all back; a key never set runs one at a time). `limits rate KEY PER_SECOND "
        "[--burst N]` lets them start at most PER_SECOND a second (`none` removes the rate).",
        prepare=prepare_limits,
    )
    limits.add_argument(
        "action", nargs="?", choices=("list", "set", "rate"), help="list (the default), set, rate"
    )
    limits.add_argument("key", nargs="?", metavar="KEY", help="with set or rate: the limit key")
    limits.add_argument(
        "value",
        nargs="?",
        metavar="N|PER_SECOND",
        help="with set: the most jobs of KEY that run at once (0 or more); with rate: the "
        "most that start a second (a number above 0), or none",
    )
    limits.add_argument(
        "--burst",
        type=non_negative_int,
        metavar="N",
        help="with rate: how many may start at once after a pause (default: a second's worth)",
    )


# -- cancel -----------------------------------------------------------------------


def cmd_cancel(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue cancel ID...``: exit 1 if an ID is not in the queue."""
    done = queue.cancel(*args.ids)
    lines = []
    if done.deleted:
        n = len(done.deleted)
        lines.append(f"removed {n} job{plural(n)} (waiting or dead): {ids_text(done.deleted)}")
    if done.dependents:
        n = done.dependents
        lines.append(f"cancelled {n} job{plural(n)} that waited for them (depends_on)")
    if done.requested:
        n = len(done.requested)
        lines.append(
            f"asked {n} running job{plural(n)} to stop: {ids_text(done.requested)} "
            "(its worker stops it; it is never retried)"
        )
    if not lines:
        lines.append("nothing cancelled")
    data = {
        "deleted": done.deleted,
        "requested": done.requested,
        "not_found": done.not_found,
        "dependents": done.dependents,
    }
    emit(args, data, "\n".join(lines))
    for missing in done.not_found:
        print(
            f"{args.subparser.prog}: job {missing} not cancelled: not in {queue.table} "
            "(it finished, or never existed)",
            file=sys.stderr,
        )
    return 1 if done.not_found else 0


def ids_text(ids: Sequence[int]) -> str:
    return ", ".join(str(i) for i in ids)


# -- result -----------------------------------------------------------------------


def cmd_result(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue result ID``: exit 1 if the job is not there and left no result."""
    result = queue.result(args.id)
    if result is None:
        raise OperationFailed(
            f"no job {args.id} in {queue.table} and no result kept: it does not exist, "
            "finished without a result ttl, or its result expired"
        )
    emit(args, result_json(result), result_text(result))
    return 0


def result_json(result: JobResult) -> dict[str, Any]:
    """A `JobResult` as ``result --json`` prints it."""
    fields = ("outcome", "finished", "value", "error", "finished_at")
    return {"id": result.job_id, **record_json(result, *fields)}


def result_text(result: JobResult) -> str:
    """``job 17: succeeded at ...`` and its value or error, for people."""
    head = f"job {result.job_id}: {result.outcome}"
    if result.finished_at is not None:
        head += f" at {format_time(result.finished_at)}"
    elif not result.finished:
        head += " (not finished)"
    lines = [head]
    if result.outcome == "succeeded":
        lines += ["value:", indent(json.dumps(result.value, indent=2, ensure_ascii=False))]
    if result.error is not None:
        lines += ["error:", indent(result.error)]
    return "\n".join(lines)


# -- limits -------------------------------------------------------------------------


def prepare_limits(args: argparse.Namespace) -> None:
    """``limits [list]`` takes nothing more; ``limits set`` takes KEY and N;
    ``limits rate`` KEY and PER_SECOND (or none), and ``--burst``."""
    if args.action in ("set", "rate"):
        value = "N" if args.action == "set" else "PER_SECOND"
        if args.key is None or args.value is None:
            raise UsageError(
                f"limits {args.action} takes a KEY and {value}: "
                f"pgqueue limits {args.action} KEY {value}"
            )
        try:
            args.key = limit_key(args.key)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"KEY: {exc}") from None
        if args.action == "set":
            args.value = _parsed("N", non_negative_int, args.value)
        elif args.value.lower() == "none":
            args.value = None
        else:
            args.value = _parsed("PER_SECOND", _number, args.value)
    elif args.key is not None or args.value is not None:
        raise UsageError("to set a limit: pgqueue limits set KEY N")
    if args.burst is not None and args.action != "rate":
        raise UsageError("--burst goes with a rate: pgqueue limits rate KEY PER_SECOND --burst N")


def _parsed(name: str, parse: Callable[[str], Any], text: str) -> Any:
    try:
        return parse(text)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"{name}: {exc}") from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def cmd_limits(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue limits [list]``, ``limits set KEY N`` and ``limits rate KEY PER_SECOND``."""
    if args.action in ("set", "rate"):
        if args.action == "set":
            queue.set_limit(args.key, args.value)
        else:
            try:
                queue.set_rate(args.key, args.value, burst=args.burst)
            except (TypeError, ValueError) as exc:
                raise UsageError(str(exc)) from None
        [state] = [s for s in queue.limits() if s.key == args.key]
        n = state.max_running
        text = (
            f"limit {state.key} set: at most {n} running job{plural(n)}{rate_text(state, ', ')} "
            f"({state.running} running, {state.waiting} waiting)"
        )
        emit(args, limit_json(state), text)
        return 0
    states = queue.limits()
    emit(args, [limit_json(s) for s in states], limits_text(states))
    return 0


def rate_text(state: LimitState, before: str = "") -> str:
    """A key's rate, as ``limits`` shows it; empty without one."""
    if state.per_second is None:
        return ""
    return f"{before}at most {state.per_second:g}/s (burst {state.burst})"


def limit_json(state: LimitState) -> dict[str, Any]:
    """A `LimitState` as ``limits --json`` prints it."""
    fields = ("key", "max_running", "set", "running", "waiting", "per_second", "burst", "tokens")
    return record_json(state, *fields)


def limits_text(states: Sequence[LimitState]) -> str:
    """Limits as an aligned table; a limit never set shows ``1 (default)``."""
    if not states:
        return "no limits (no job has a limit key, and no limit was set)"
    rows: list[list[object]] = [
        [
            s.key,
            s.max_running if s.set else f"{s.max_running} (default)",
            s.running,
            s.waiting,
            rate_text(s)[len("at most ") :] or "-",
        ]
        for s in states
    ]
    return table_text(["KEY", "LIMIT", "RUNNING", "WAITING", "RATE"], rows, right=[2, 3])
