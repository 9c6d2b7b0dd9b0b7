"""What each operator subcommand does with the queue it is given, and what it prints."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..core.jobs import DEFAULT_QUEUE, DuplicateJob, JobSpec, JobStatus
from ..core.jsontext import load_json
from ..core.specs import validate_spec
from ..sync.queue import Queue
from .errors import OperationFailed, UsageError
from .output import (
    counts_text,
    emit,
    format_duration,
    format_time,
    indent,
    job_json,
    jobs_text,
    plural,
    queue_json,
    queues_json,
    queues_text,
    stats_json,
    stats_text,
)

# A payload nested deeper than this is refused with a clear message (Python's
# own reader would fail on a thousand levels with a RecursionError).
MAX_DEPTH = 500


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


def _job_options(args: argparse.Namespace) -> dict[str, Any]:
    """The job's options as ``enqueue`` and `validate_spec` take them."""
    return {
        "run_at": args.run_at,
        "delay": args.delay,
        "max_attempts": args.max_attempts,
        "queue": args.queue,
        "priority": args.priority,
        "unique_key": args.unique_key,
        "unique": args.unique,
        "unique_for": args.unique_for,
        "on_duplicate": args.on_duplicate,
        "result_ttl": args.result_ttl,
        "limit_key": args.limit_key,
        "depends_on": args.depends_on,
    }


def prepare_enqueue(args: argparse.Namespace) -> None:
    """Read and check the job before connecting: bad input writes nothing."""
    text = sys.stdin.read() if args.payload == "-" else args.payload
    try:
        args.payload = (
            None if text is None else load_json(text, "PAYLOAD_JSON", max_depth=MAX_DEPTH)
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.unique_key is None and (args.unique or args.on_duplicate):
        raise UsageError("--unique and --on-duplicate go with --unique-key")
    args.unique = args.unique or "queued"
    args.on_duplicate = args.on_duplicate or "return"
    try:
        validate_spec(JobSpec(args.kind, args.payload, **_job_options(args)))
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def cmd_enqueue(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue enqueue KIND [PAYLOAD_JSON]``: exit 1 for a duplicate with
    ``--on-duplicate raise``."""

    def enqueue(on_duplicate: str) -> int:
        options = {**_job_options(args), "on_duplicate": on_duplicate}
        try:
            return queue.enqueue(args.kind, args.payload, **options)
        except ValueError as exc:  # a dependency that never existed: nothing written
            raise UsageError(str(exc)) from None

    def done(job_id: int, text: str, *, duplicate: bool = False, replaced: bool = False) -> int:
        data = {
            "id": job_id,
            "kind": args.kind,
            "table": queue.table,
            "queue": args.queue,
            "priority": args.priority,
            "duplicate": duplicate,
            "replaced": replaced,
            "limit_key": args.limit_key,
            "depends_on": args.depends_on or [],
            "result_ttl_seconds": (
                None if args.result_ttl is None else args.result_ttl.total_seconds()
            ),
        }
        emit(args, data, text)
        return 0

    key = args.unique_key
    # "return" and "raise" write the same (nothing, for a duplicate): asking
    # with "raise" tells the command which happened, so that it can say so.
    try:
        new_id = enqueue("raise")
    except DuplicateJob as exc:
        held = exc.existing_id
        if args.on_duplicate == "raise":
            raise OperationFailed(f"{exc}; nothing enqueued") from None
        if args.on_duplicate == "return":
            text = f"job {held} holds unique key {key!r} already: nothing enqueued"
            return done(held, text, duplicate=True)
        # Replace the holder's payload and run_at; if it started meanwhile,
        # the key is free again and this is a new job.
        new_id = enqueue("replace")
        if new_id == held:
            text = f"job {held} holds unique key {key!r}: its payload and run_at replaced"
            return done(held, text, duplicate=True, replaced=True)
    if args.run_at is not None:
        due = f", due at {format_time(args.run_at)}"
    elif args.delay:
        due = f", due in {format_duration(args.delay)}"
    else:
        due = ""
    where = "" if args.queue == DEFAULT_QUEUE else f" in queue {args.queue}"
    if args.priority:
        where += f" at priority {args.priority}"
    if args.limit_key is not None:
        where += f" under limit {args.limit_key}"
    if args.result_ttl is not None:
        due += f", its result kept {format_duration(args.result_ttl)}"
    if args.depends_on:
        due += f", waiting for job {', '.join(map(str, args.depends_on))}"
    return done(new_id, f"enqueued job {new_id} ({args.kind}){where}{due}")


def cmd_stats(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue stats``."""
    stats = queue.stats(args.visibility_timeout)
    lease = args.visibility_timeout
    emit(args, stats_json(queue.table, stats, lease), stats_text(queue.table, stats, lease))
    return 0


def cmd_jobs_list(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue jobs list``."""
    jobs = queue.jobs(status=args.status, kinds=args.kinds, limit=args.limit, after_id=args.after,
                      queues=args.queues)  # fmt: skip
    emit(args, [job_json(j) for j in jobs], jobs_text(jobs))
    return 0


def cmd_jobs_show(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue jobs show ID``: exit 1 if there is no such job."""
    job = queue.get(args.id)
    if job is None:
        raise OperationFailed(
            f"no job {args.id} in {queue.table} (a job that succeeded leaves no row)"
        )
    fields: list[tuple[str, object]] = [
        ("id", job.id),
        ("kind", job.kind),
        ("queue", job.queue),
        ("priority", job.priority),
        ("unique key", "-" if job.unique_key is None else job.unique_key),
        ("limit key", "-" if job.limit_key is None else job.limit_key),
        ("result ttl", "-" if job.result_ttl is None else format_duration(job.result_ttl)),
        ("status", job.status.value + (" (cancel requested)" if job.cancel_requested else "")),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("run at", format_time(job.run_at)),
        ("created at", format_time(job.created_at)),
        ("locked by", job.locked_by or "-"),
        ("locked at", format_time(job.locked_at)),
    ]
    if job.parents is not None:
        fields.append(("waits for", ", ".join(map(str, sorted(job.parents))) or "-"))
    width = max(len(name) for name, _ in fields)
    lines = [f"{name.ljust(width)}  {value}" for name, value in fields]
    lines += ["payload:", indent(json.dumps(job.payload, indent=2, ensure_ascii=False))]
    if job.last_error is not None:
        lines += ["last error:", indent(job.last_error)]
    emit(args, job_json(job), "\n".join(lines))
    return 0


def cmd_dead_list(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue dead list``."""
    jobs = queue.jobs(status="dead", kinds=args.kinds, limit=args.limit, after_id=args.after,
                      queues=args.queues)  # fmt: skip
    emit(args, [job_json(j) for j in jobs], jobs_text(jobs, dead=True))
    return 0


def prepare_dead_retry(args: argparse.Namespace) -> None:
    """IDs or ``--all``, and ``--kind`` only with ``--all``."""
    if args.all and args.ids:
        raise UsageError("give job IDs or --all, not both")
    if not args.all and not args.ids:
        raise UsageError("name the dead jobs to retry by ID, or give --all")
    if args.kinds and not args.all:
        raise UsageError("--kind goes with --all (IDs name their jobs already)")


def cmd_dead_retry(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue dead retry``: exit 1 if an ID named is not a dead job."""
    if args.all:
        count = queue.retry_dead(kinds=args.kinds)
        emit(args, {"retried": count}, f"retried {count} dead job{plural(count)}")
        return 0
    ids = list(dict.fromkeys(args.ids))
    # What each job was, to say why one is not retried; the retry itself
    # touches only the jobs that are dead when it runs.
    found = {i: queue.get(i) for i in ids}
    count = queue.retry(ids)
    refused = [
        {"id": i, "status": None if job is None else job.status.value}
        for i, job in found.items()
        if job is None or job.status is not JobStatus.DEAD
    ]
    # A dead unique job stays dead while another job holds its key.
    held = []
    if count < len(ids) - len(refused):
        for i, job in found.items():
            now = queue.get(i) if job is not None and job.unique_key is not None else None
            if now is not None and now.status is JobStatus.DEAD:
                held.append({"id": i, "unique_key": now.unique_key})
    summary = f"retried {count} dead job{plural(count)}"
    emit(args, {"retried": count, "not_dead": refused, "key_held": held}, summary)
    if count == len(ids):
        return 0
    for r in refused:
        why = "no such job" if r["status"] is None else f"it is {r['status']}, not dead"
        print(f"{args.subparser.prog}: job {r['id']} not retried: {why}", file=sys.stderr)
    for h in held:
        print(f"{args.subparser.prog}: job {h['id']} not retried: another job holds its "
              f"unique key {h['unique_key']!r}", file=sys.stderr)  # fmt: skip
    stale = len(ids) - count - len(refused) - len(held)
    if stale:  # it changed between the look and the retry
        print(f"{args.subparser.prog}: {stale} job(s) were no longer dead", file=sys.stderr)
    return 1


def cmd_dead_purge(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue dead purge --older-than DURATION``."""
    count = queue.purge_dead(args.older_than, kinds=args.kinds)
    age = format_duration(args.older_than)
    emit(args, {"purged": count}, f"purged {count} dead job{plural(count)} older than {age}")
    return 0


def cmd_history_prune(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue history prune --older-than DURATION``."""
    count = queue.prune_history(args.older_than)
    age = format_duration(args.older_than)
    emit(args, {"pruned": count}, f"pruned {count} history row{plural(count)} older than {age}")
    return 0


def cmd_queues_list(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue queues list``."""
    states = queue.queues()
    emit(args, queues_json(states), queues_text(states))
    return 0


def cmd_queues_pause(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue queues pause NAME``."""
    queue.pause_queue(args.name)
    return report_queue(queue, args, "paused", ": no worker claims its jobs until it is resumed")


def cmd_queues_resume(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue queues resume NAME``."""
    queue.resume_queue(args.name)
    return report_queue(queue, args, "resumed")


def report_queue(queue: Queue, args: argparse.Namespace, what: str, then: str = "") -> int:
    """Print the queue just paused or resumed, with its jobs: a queue with
    none may be a typo, and the counts show it."""
    [state] = [s for s in queue.queues() if s.name == args.name]
    text = f"queue {state.name} {what} ({counts_text(state.counts)}){then}"
    emit(args, queue_json(state), text)
    return 0


def cmd_reap(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue reap``."""
    ids = queue.reap(args.visibility_timeout)
    lease = format_duration(args.visibility_timeout)
    if ids:
        text = f"returned {len(ids)} job{plural(len(ids))} past a {lease} lease to pending: " + (
            ", ".join(str(i) for i in ids)
        )
    else:
        text = f"no job returned to pending (none running past a {lease} lease)"
    lease_seconds = args.visibility_timeout.total_seconds()
    emit(args, {"reaped": ids, "visibility_timeout_seconds": lease_seconds}, text)
    return 0
