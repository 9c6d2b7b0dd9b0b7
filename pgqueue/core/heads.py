"""Where a worker's claim starts in each level, so that a held snapshot costs it nothing.

A job claimed and then deleted leaves its entry in the claim index until
vacuum removes it, and vacuum cannot while any snapshot older than the
delete is held: a long report, ``pg_dump``, a logical replication slot, a
standby with ``hot_standby_feedback``. Each claim then reads every such
entry at the start of a (queue, priority) level, and fetches its row to
find it dead, before it reaches a live job: the claim costs O(jobs claimed
since the snapshot was taken), not O(batch).

A claimer therefore remembers, for each level, the (run_at, id) of the last
job it claimed there: its *head*. A claim given heads starts each level
after its head and never steps into the entries before it (the statement's
``heads``, in `pgqueue.core.sql`). A job that is due earlier than a head
(enqueued with a ``run_at`` in the past, or by a transaction that committed
late, or returned by a retry, a release or the reaper) is behind it and
invisible to such a claim; a *rescan*, a claim without heads, finds it.

Heads are used only while they pay: a turn reports how many claim-index
entries its transaction read (`Turn.walked`). Far more than its batch
(`WALK_FACTOR` times the batch, plus `WALK_SLACK`) says dead entries are
being walked: heads go into use, and a rescan runs every `RESCAN_EVERY`
seconds (at once again while rescans keep finding a full batch behind the
heads). A rescan that reads little says the dead entries are gone: heads
go out of use, and claims are exactly what they are without this module.
So without a held snapshot nothing changes, and with one a job behind a
head waits at most about `RESCAN_EVERY` seconds.

No I/O here: the fetcher owns one `Heads`, asks it what to send with each
claim (`Heads.send`) and tells it what came back (`Heads.landed`).

>>> heads = Heads()
>>> heads.send(now=0.0).params()   # not in use: an ordinary claim
{'heads': '[]'}
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .jobs import Job

__all__ = [
    "MAX_HEADS",
    "NO_HEADS",
    "RESCAN_EVERY",
    "WALK_FACTOR",
    "WALK_SLACK",
    "ClaimHeads",
    "Heads",
]

RESCAN_EVERY = 5.0
"""Seconds between two claims without heads while heads are in use: the
longest a job behind a head waits (a rescan reads every dead entry, so it
is kept rare enough to stay out of the claim's p99)."""
WALK_FACTOR = 8
WALK_SLACK = 200
"""A turn that read more than ``WALK_FACTOR * batch + WALK_SLACK`` claim-index
entries walked dead ones (a claim's probes read a few entries per level,
and other workers' claims leave some in its way)."""
MAX_HEADS = 256
"""At most this many levels are remembered; past it, all are forgotten (and
learnt again from the next claims)."""

Key = tuple[str, int]
Head = tuple[datetime, int]


@dataclass(frozen=True, slots=True)
class ClaimHeads:
    """The heads one claim is sent with (none: an ordinary claim)."""

    heads: tuple[tuple[Key, Head], ...] = ()
    rescan: bool = False
    """A claim without heads while heads are in use."""

    def params(self) -> dict[str, Any]:
        """The statement's ``heads`` parameter: a JSON array of levels."""
        return {
            "heads": json.dumps(
                [
                    {"queue": q, "priority": p, "run_at": r.isoformat(), "id": i}
                    for (q, p), (r, i) in self.heads
                ]
            )
        }


NO_HEADS = ClaimHeads()


@dataclass
class Heads:
    """One claimer's heads, and whether they are in use (see the module)."""

    rescan_every: float = RESCAN_EVERY
    _heads: dict[Key, Head] = field(default_factory=dict)
    _in_use: bool = False
    _rescan_at: float = 0.0

    @property
    def in_use(self) -> bool:
        return self._in_use

    def send(self, *, now: float) -> ClaimHeads:
        """What the next claim, sent at ``now`` (seconds, any clock), starts from."""
        if not self._in_use:
            return NO_HEADS
        if now >= self._rescan_at:
            return ClaimHeads(rescan=True)
        return ClaimHeads(tuple(self._heads.items()))

    def rescan_next(self) -> None:
        """Make the next claim a rescan (if heads are in use): a claim with
        heads that found nothing is no proof that nothing is ready."""
        self._rescan_at = 0.0

    def landed(
        self, sent: ClaimHeads, jobs: Iterable[Job], *, walked: int, limit: int, now: float
    ) -> None:
        """A claim sent with ``sent`` claimed ``jobs`` (of at most ``limit``),
        reading ``walked`` claim-index entries, and came back at ``now``."""
        walking = walked > WALK_FACTOR * limit + WALK_SLACK
        if not self._in_use and not walking:
            return  # the common case: nothing to remember
        claimed, behind = self._remember(jobs)
        if sent.heads:
            return
        if walking:
            if not self._in_use:
                self._in_use = True
                # The claim just made read everything: the next may use heads.
                self._rescan_at = now + self.rescan_every
            elif sent.rescan:
                # More may be behind the heads than one batch: look again now.
                full = claimed >= limit and behind > 0
                self._rescan_at = now if full else now + self.rescan_every
        elif sent.rescan:
            self._in_use = False
            self._heads.clear()

    def _remember(self, jobs: Iterable[Job]) -> tuple[int, int]:
        """Move the heads to the jobs claimed; how many were claimed, and how
        many of them were behind their level's head."""
        claimed = behind = 0
        for job in jobs:
            claimed += 1
            if job.limit_key is not None:
                continue  # claimed through the limited index, by its key
            key = (job.queue, job.priority)
            head = self._heads.get(key)
            mark = (job.run_at, job.id)
            if head is None or mark > head:
                if head is None and len(self._heads) >= MAX_HEADS:
                    self._heads.clear()
                self._heads[key] = mark
            else:
                behind += 1
        return claimed, behind
