"""What `stats()` and `queues()` report, read by `counts.tally` (counts that never scan)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from ..jobs import DEFAULT_VISIBILITY_TIMEOUT, ROW_STATUSES, JobStatus, Stats, validate_timeout
from ..plans import Operation, Plan, Query
from . import counts
from .counts import CountStatements, Tally

__all__ = ["InspectStatements", "QueueState", "queue_states", "stats"]

# The statements of this feature are those of counting.
InspectStatements = CountStatements


@dataclass(frozen=True, slots=True)
class QueueState:
    """A queue as `queues()` reports it: paused or not, and its jobs by status.

    On a large table a count may be capped or estimated: ``estimated`` names
    the statuses whose count is not exact (see `Stats.estimated`)."""

    name: str
    paused: bool
    counts: dict[JobStatus, int]
    estimated: frozenset[JobStatus] = field(default_factory=frozenset)


def _timeout(visibility_timeout: timedelta | None) -> timedelta:
    return validate_timeout(
        DEFAULT_VISIBILITY_TIMEOUT if visibility_timeout is None else visibility_timeout,
        "visibility_timeout",
    )


def stats(s: CountStatements, visibility_timeout: timedelta | None) -> Operation[Stats]:
    timeout = _timeout(visibility_timeout)

    def plan() -> Plan[Stats]:
        return _stats((yield from counts.tally(s, timeout)))

    return Operation(plan())


def _stats(t: Tally) -> Stats:
    tables: dict[str, dict[object, dict[JobStatus, int]]] = {}
    for key in ("kind", "queue", "priority"):
        table = tables[key] = {}
        for value, status, count in counts.by(t.groups, key):
            table.setdefault(value, dict.fromkeys(ROW_STATUSES, 0))[status] += count.value
    estimated: set[str] = set(t.estimated())
    if not t.expired.exact:
        estimated.add("expired")
    return Stats(
        {status: count.value for status, count in t.totals.items()},
        dict(sorted(tables["kind"].items())),  # type: ignore[arg-type]
        t.oldest_ready,
        t.expired.value,
        dict(sorted(tables["queue"].items())),  # type: ignore[arg-type]
        dict(sorted(tables["priority"].items(), reverse=True)),  # type: ignore[arg-type]
        estimated=frozenset(estimated),
    )


# Pause records read by `queue_states`, at most.
MAX_PAUSE_RECORDS = 100_000


def queue_states(s: CountStatements) -> Operation[list[QueueState]]:
    """Every queue with jobs or a pause record, by name."""

    def plan() -> Plan[list[QueueState]]:
        t = yield from counts.tally(s, DEFAULT_VISIBILITY_TIMEOUT)
        pauses = yield Query(s.pause_records, (MAX_PAUSE_RECORDS,))
        return _queue_states(t, dict(pauses))

    return Operation(plan())


def _queue_states(t: Tally, paused: dict[str, bool]) -> list[QueueState]:
    found: dict[str, dict[JobStatus, int]] = {}
    inexact: dict[str, set[JobStatus]] = {}
    for queue, status, count in counts.by(t.groups, "queue"):
        found.setdefault(queue, dict.fromkeys(ROW_STATUSES, 0))[status] = count.value
        if not count.exact:
            inexact.setdefault(queue, set()).add(status)
    return [
        QueueState(
            name,
            bool(paused.get(name, False)),
            found.get(name, dict.fromkeys(ROW_STATUSES, 0)),
            frozenset(inexact.get(name, ())),
        )
        for name in sorted(set(found) | set(paused))
    ]
