"""``pgqueue check``: the jobs waiting in a table that the current code cannot run.

Before a deploy, the jobs already in the table meet the new code. A job
whose kind has no handler any more, or whose payload no longer binds to its
task's signature (a parameter renamed, removed or retyped), would fail
there; `judge` finds them first. The table is read in pages of pending,
waiting and dead jobs by id (`PAGE`), each under a ``statement_timeout``:
a plain ``SELECT`` takes no lock that a writer waits for, and a page is
cheap whatever the table's size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .jobs import Job
from .ops import QueueCore
from .plans import Operation, Plan, Query
from .queue.table import Table
from .tasks import TaskCallError, call_arguments, task_of
from .typed import PayloadMismatch

__all__ = ["CheckReport", "Finding", "judge", "page"]

# The statuses a deploy's code will meet: pending, waiting (a workflow's,
# read by name: a table whose schema has none has none) and dead (an
# operator may retry them).
PAGE: Final = """
SELECT {cols} FROM {table}
 WHERE id > %(after)s AND status IN ('pending', 'waiting', 'dead')
 ORDER BY id
 LIMIT %(limit)s"""
TIMEOUT: Final = "SELECT set_config('statement_timeout', %(timeout)s, true)"

NO_HANDLER = "no handler"
STALE_PAYLOAD = "payload does not bind"
SAMPLE_IDS = 5


def page(core: QueueCore, after: int, limit: int, timeout_ms: int) -> Operation[list[Job]]:
    """The next ``limit`` jobs to check after id ``after``, read within
    ``timeout_ms`` (in its own transaction)."""
    statement = Table.named(core.table).render(PAGE)

    def plan() -> Plan[list[Job]]:
        yield Query(TIMEOUT.encode(), {"timeout": f"{int(timeout_ms)}ms"})
        rows = yield Query(statement, {"after": after, "limit": limit})
        return [Job.from_row(r) for r in rows]

    return Operation(plan(), atomic=True)


def judge(job: Job, handlers: Mapping[str, Callable[..., Any]]) -> tuple[str, str] | None:
    """What the current code would make of ``job``: None if it can run it,
    else (problem, detail)."""
    handler = handlers.get(job.kind)
    if handler is None:
        return NO_HANDLER, f"no handler for kind {job.kind!r}"
    task = task_of(handler)
    if task is None:  # a plain handler: its payload is its own business
        return None
    try:
        args, kwargs = call_arguments(job)
        task.signature.bind(*args, **kwargs)
        task.arguments(job)
    except (TaskCallError, PayloadMismatch, TypeError, ValueError) as exc:
        return STALE_PAYLOAD, str(exc)
    return None


@dataclass(slots=True)
class Finding:
    """The jobs of one kind with one problem: how many, a few ids, the first detail."""

    kind: str
    problem: str
    detail: str
    count: int = 0
    sample_ids: list[int] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class CheckReport:
    """What a check found, by (kind, problem); and how many jobs it read."""

    checked: int = 0
    findings: dict[tuple[str, str], Finding] = field(default_factory=dict)

    def add(self, jobs: Iterable[Job], handlers: Mapping[str, Callable[..., Any]]) -> None:
        for job in jobs:
            self.checked += 1
            verdict = judge(job, handlers)
            if verdict is None:
                continue
            problem, detail = verdict
            finding = self.findings.get((job.kind, problem))
            if finding is None:
                finding = self.findings[job.kind, problem] = Finding(job.kind, problem, detail)
            finding.count += 1
            status = str(job.status)
            finding.statuses[status] = finding.statuses.get(status, 0) + 1
            if len(finding.sample_ids) < SAMPLE_IDS:
                finding.sample_ids.append(job.id)

    @property
    def ok(self) -> bool:
        return not self.findings

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "checked": self.checked,
            "findings": [
                {"kind": f.kind, "problem": f.problem, "count": f.count,
                 "statuses": f.statuses, "sample_ids": f.sample_ids, "detail": f.detail}
                for f in sorted(self.findings.values(), key=lambda f: (f.kind, f.problem))
            ],
        }  # fmt: skip
