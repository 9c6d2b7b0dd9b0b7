"""A worker's turn in one statement: record its successes and failures,
claim its next batch.

The parts touch disjoint rows (running ones; pending ones), so one snapshot
serves them all. The worker's bookkeeping commits without waiting for the
WAL flush: should the server crash, the last moments of it are forgotten
and those jobs run again, which at-least-once delivery allows. Enqueues are
never relaxed. A turn is a function of a frozen `TurnSpec`, which is also
the key its rendering is kept by.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from psycopg import sql

from .claim import ClaimSpec, claim_update, limited_ctes, served_by
from .leaving import left_free, told
from .outcomes import NO_FAILURES, failure_ctes, success_ctes
from .table import Table

__all__ = ["TurnSpec", "turn_statement"]

CYCLE: Final = (
    "\nWITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),"
    "{limited}{done},{failures},"
    """
claimed AS ({claim})
SELECT (SELECT coalesce(array_agg(id), '{{}}') FROM done),
       (SELECT coalesce(array_agg(id), '{{}}') FROM failed),
       (SELECT coalesce(array_agg(status), '{{}}') FROM failed),
       (SELECT coalesce(json_agg(claimed), '[]') FROM claimed),
       {told},
       EXISTS (SELECT FROM {slots}),
       {wake},
       {left_free}
  FROM relax"""
)
# Its last column but one: in how many seconds a key it left jobs of for want
# of a token has one.
WAKE: Final = "(SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1)"


@dataclass(frozen=True, slots=True)
class TurnSpec:
    """The shape of a worker's turn: its claim's (see `ClaimSpec`), and
    what it records. Without `failures`, it records none (and takes no
    failure parameters); if `plain`, its successes are those that hold no
    limit slot and keep no result (and it takes no result parameters)."""

    queues: bool = False
    kinds: bool = False
    budget: bool = False
    limit: int = 100
    limited: bool = True
    limited_max: int | None = None  # at most `limit`
    failures: bool = True
    plain: bool = False

    @property
    def sources(self) -> tuple[str, ...]:
        """The CTEs of the jobs it ends."""
        return ("done",) * (not self.plain) + ("failed_rows", "cancelled") * self.failures

    @property
    def hands_on(self) -> bool:
        """Whether its successes hand their slots on: when it claims limited
        jobs (`settle`, a turn that claims nothing, hands nothing on)."""
        return self.limited and not self.plain and self.limit > 0

    @property
    def claim(self) -> ClaimSpec:
        return ClaimSpec(
            queues=self.queues,
            kinds=self.kinds,
            limit=self.limit,
            budget=self.budget,
            worker=True,
            limited=self.limited,
            limited_max=self.limited_max,
            handed=self.hands_on,
        )


def turn_statement(t: Table, spec: TurnSpec) -> bytes:
    claim = spec.claim
    ctes = limited_ctes(t, claim)
    served = served_by(t, spec.queues, spec.kinds) if spec.hands_on else None
    sources = spec.sources
    return t.render(
        CYCLE,
        done=success_ctes(t, worker=True, plain=spec.plain, served=served),
        failures=failure_ctes(t) if spec.failures else sql.SQL(NO_FAILURES),
        limited=ctes + sql.SQL(",") if spec.limited else ctes,
        claim=claim_update(t, claim),
        told=told(t, *sources) if sources else sql.SQL("0"),
        wake=sql.SQL(WAKE if spec.limited else "NULL::double precision"),
        left_free=left_free(*sources) if sources else sql.SQL("0"),
    )
