"""What the operator subcommands print: aligned text for people, or JSON with ``--json``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ..core.jobs import Job, JobStatus, Stats


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    """Print ``data`` as JSON with --json, else ``text``."""
    stream = sys.stdout
    if args.json:
        json.dump(data, stream, indent=2)
        stream.write("\n")
    elif text:
        stream.write(text if text.endswith("\n") else text + "\n")


def format_duration(value: timedelta) -> str:
    """A duration the way the options take it: ``15m``, ``1h30m``, ``7d``; ``0.6s`` below 10s."""
    if value < timedelta(seconds=10):
        return f"{value.total_seconds():.1f}s".replace(".0s", "s")
    seconds = int(value.total_seconds())
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    units = zip((days, hours, minutes, secs), "dhms", strict=True)
    return "".join(f"{n}{unit}" for n, unit in units if n)


def format_time(value: datetime | None) -> str:
    """A time for people: local time zone, to the second, with its offset."""
    return "-" if value is None else value.astimezone().isoformat(sep=" ", timespec="seconds")


def table_text(
    headers: Sequence[str], rows: Sequence[Sequence[object]], right: Sequence[int] = (0,)
) -> str:
    """Rows aligned under ``headers``; the columns numbered in ``right`` are right-aligned."""
    cells = [list(headers)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def first_line(text: str | None, width: int = 60) -> str:
    """The first line of a text, cut to ``width``; ``-`` for none."""
    if not text:
        return "-"
    line = text.strip().splitlines()[0] if text.strip() else "-"
    return line if len(line) <= width else line[: width - 1] + "…"


def job_json(job: Job) -> dict[str, Any]:
    """A job as ``--json`` prints it: every column, times in ISO 8601."""

    def iso(value: datetime | None) -> str | None:
        return None if value is None else value.isoformat()

    return {
        "id": job.id,
        "kind": job.kind,
        "status": job.status.value,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "run_at": iso(job.run_at),
        "locked_by": job.locked_by,
        "locked_at": iso(job.locked_at),
        "last_error": job.last_error,
        "created_at": iso(job.created_at),
        "payload": job.payload,
    }


def jobs_text(jobs: list[Job], *, dead: bool = False) -> str:
    """Jobs as an aligned table (the columns of a dead job, with ``dead``)."""
    if not jobs:
        return "no dead jobs" if dead else "no jobs"
    rows: list[list[object]] = []
    for j in jobs:
        attempts = f"{j.attempts}/{j.max_attempts}"
        error = first_line(j.last_error)
        if dead:
            rows.append([j.id, j.kind, attempts, format_time(j.run_at), error])
        else:
            rows.append([j.id, j.kind, j.status.value, attempts, format_time(j.run_at),
                         j.locked_by or "-", error])  # fmt: skip
    if dead:
        headers = ["ID", "KIND", "ATTEMPTS", "LAST RUN DUE", "LAST ERROR"]
    else:
        headers = ["ID", "KIND", "STATUS", "ATTEMPTS", "RUN AT", "LOCKED BY", "LAST ERROR"]
    return table_text(headers, rows)


def stats_json(table: str, stats: Stats, lease: timedelta) -> dict[str, Any]:
    """`Stats` as ``pgqueue stats --json`` prints them."""
    age = stats.oldest_pending_age
    return {
        "table": table,
        "total": stats.total,
        "by_status": {s.value: n for s, n in stats.by_status.items()},
        "by_kind": {k: {s.value: n for s, n in c.items()} for k, c in stats.by_kind.items()},
        "oldest_pending_age_seconds": None if age is None else age.total_seconds(),
        "expired": stats.expired,
        "visibility_timeout_seconds": lease.total_seconds(),
    }


def stats_text(table: str, stats: Stats, lease: timedelta) -> str:
    """`Stats` as aligned tables for people."""
    statuses = list(JobStatus)
    by_status: list[list[object]] = [[s.value, stats.by_status.get(s, 0)] for s in statuses]
    parts = [
        f"queue {table}",
        "",
        table_text(["STATUS", "JOBS"], [*by_status, ["total", stats.total]], right=[1]),
    ]
    if stats.by_kind:
        kinds: list[list[object]] = [
            [kind, *(counts.get(s, 0) for s in statuses)] for kind, counts in stats.by_kind.items()
        ]
        headers = ["KIND", *(s.value.upper() for s in statuses)]
        parts += ["", table_text(headers, kinds, right=range(1, len(headers)))]
    age = stats.oldest_pending_age
    parts += [
        "",
        f"oldest ready job waiting: {'-' if age is None else format_duration(age)}",
        f"running past their lease ({format_duration(lease)}): {stats.expired}",
    ]
    return "\n".join(parts)


def indent(text: str) -> str:
    """Every line of ``text`` indented by two spaces."""
    return "\n".join("  " + line for line in text.splitlines() or [""])


def plural(n: int) -> str:
    """``s`` unless ``n`` is 1."""
    return "" if n == 1 else "s"
