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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from psycopg import sql

from ..heads import NO_HEADS, ClaimHeads
from ..jobs import Job, JobStatus, validate_claim_bytes, validate_limit
from ..plans import Operation, Plan, Query
from ..schema.columns import job_json
from .claim import ClaimSpec, claim_params, claim_update, in_claim_order, limited_ctes, served_by
from .leaving import left_free, told
from .outcomes import (
    NO_FAILURES,
    Failure,
    failure_arrays,
    failure_ctes,
    recorded_failures,
    result_arrays,
    success_ctes,
)
from .table import Table

if TYPE_CHECKING:
    from ..sql import Statements

__all__ = ["Turn", "TurnSpec", "Turns", "WorkerClaim", "turn_statement"]

TURN: Final = (
    "\nWITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),"
    "\nread AS MATERIALIZED ("
    "SELECT pg_stat_get_xact_tuples_returned({unlimited_index}::regclass) AS before),"
    "{limited}{failures},{done},"
    """
claimed AS ({claim})
SELECT (SELECT coalesce(array_agg(id), '{{}}') FROM done),
       (SELECT coalesce(array_agg(id), '{{}}') FROM failed),
       (SELECT coalesce(array_agg(status), '{{}}') FROM failed),
       (SELECT coalesce(json_agg({claimed_json}), '[]') FROM claimed),
       {told},
       EXISTS (SELECT FROM {slots}),
       {wake},
       {left_free},
       pg_stat_get_xact_tuples_returned({unlimited_index}::regclass) - read.before
  FROM relax, read"""
)
# Its last columns: in how many seconds a key it left jobs of for want of a
# token has one (`WAKE`); how many slots it left free; how many claim-index
# entries it read (`pgqueue.core.heads`). The server counts the entries a
# backend read since it last reported its statistics (about once a second,
# whatever the function's name says): `read`, scanned before the columns
# are, holds the count before the claim.
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
    # Its claim starts each level after its head (a ``heads`` parameter:
    # `pgqueue.core.heads`); without, it is the claim it was before heads.
    heads: bool = False

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
            heads=self.heads,
        )


def turn_statement(t: Table, spec: TurnSpec) -> bytes:
    claim = spec.claim
    ctes = limited_ctes(t, claim)
    served = served_by(t, spec.queues, spec.kinds) if spec.hands_on else None
    sources = spec.sources
    return t.render(
        TURN,
        # What its failures cancel, its successes release not (they come first).
        done=success_ctes(
            t,
            worker=True,
            plain=spec.plain,
            served=served,
            spared=("failed_rows", "cancelled") if spec.failures else (),
        ),
        failures=failure_ctes(t) if spec.failures else sql.SQL(NO_FAILURES),
        limited=ctes + sql.SQL(",") if spec.limited else ctes,
        claim=claim_update(t, claim),
        told=told(t, *sources) if sources else sql.SQL("0"),
        wake=sql.SQL(WAKE if spec.limited else "NULL::double precision"),
        left_free=left_free(*sources) if sources else sql.SQL("0"),
        claimed_json=job_json("claimed"),
    )


@dataclass(frozen=True, slots=True)
class Turn:
    """What one turn of a worker wrote and claimed."""

    completed: list[int]
    failed: dict[int, JobStatus]
    claimed: list[Job]
    # In how many seconds a key with a rate (`set_rate`) whose jobs the turn
    # left for want of a token has one again; None if no key waits so.
    token_in: float | None = None
    # How many limit slots its outcomes left free: slots handed straight to a
    # waiting job of their key (claimed by this very turn) are not counted.
    slots_left_free: int = 0
    # How many claim-index entries the turn read, dead ones included
    # (`pgqueue.core.heads`).
    walked: int = 0


@dataclass(frozen=True, slots=True)
class WorkerClaim:
    """What a worker's turns claim, the same for its whole run: built and
    validated once (`WorkerClaim.of`), by its fetcher. A turn adds only its
    size, its heads and its outcomes."""

    worker: str
    kinds: tuple[str, ...] | None = None
    queues: tuple[str, ...] | None = None
    # The batch stops at the job whose payload takes it past this many bytes.
    claim_bytes: int | None = None
    # Of limited jobs, a turn takes at most this many (a worker: its
    # concurrency, so that it holds no slot for a job that waits for a runner).
    limited_max: int | None = None

    @classmethod
    def of(
        cls,
        worker: str,
        kinds: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
        claim_bytes: int | None = None,
        limited_max: int | None = None,
    ) -> WorkerClaim:
        """The claim, validated (a clear error for bad input)."""
        checked = claim_params(1, worker, kinds, queues)
        kinds, queues = checked.get("kinds"), checked.get("queues")
        return cls(
            worker,
            None if kinds is None else tuple(kinds),
            None if queues is None else tuple(queues),
            validate_claim_bytes(claim_bytes),
            None if limited_max is None else validate_limit(limited_max),
        )

    def params(self, limit: int) -> dict[str, Any]:
        """A turn's claim parameters (`claim_params`) for up to ``limit`` jobs."""
        params: dict[str, Any] = {"worker": self.worker, "limit": validate_limit(limit)}
        if self.kinds is not None:
            params["kinds"] = list(self.kinds)
        if self.queues is not None:
            params["queues"] = list(self.queues)
        if self.claim_bytes is not None:
            params["claim_bytes"] = self.claim_bytes
        if self.limited_max is not None:
            params["limited_max"] = min(self.limited_max, params["limit"])
        return params


class Turns:
    """A worker's turns on one table (`QueueCore.turns`)."""

    def __init__(self, statements: Statements) -> None:
        self.sql = statements
        # Whether the table has limit slots, as the last worker's turn saw it
        # (written by the turns' plans, read when the next turn is built):
        # while it has none, turns leave the claim of limited jobs out. A
        # table's first slot comes with its first limited job, whose
        # notification wakes the workers: the next turn includes them.
        self.limits_in_use = True

    def turn(
        self,
        succeeded: Sequence[int],
        failures: Sequence[Failure],
        claim: WorkerClaim,
        limit: int,
        *,
        results: Mapping[int, str] | None = None,
        plain: bool = False,
        heads: ClaimHeads = NO_HEADS,
    ) -> Operation[Turn]:
        """One turn of a worker: record its outcomes and claim up to ``limit``
        jobs as ``claim`` says, in one statement (`turn_statement`).
        ``results``: the return values (JSON text) of the successes that keep
        one. ``plain``: the caller knows that no success holds a limit slot
        or keeps a result (a worker knows from its `Job`), and the statement
        leaves that bookkeeping out; should one do either, a second statement
        records it in full. ``heads``: where the claim starts in each level
        (`pgqueue.core.heads`)."""
        return self.take(succeeded, failures, claim.worker, claim.params(limit), results, plain,
                         heads)  # fmt: skip

    def take(
        self,
        succeeded: Sequence[int],
        failures: Sequence[Failure],
        worker: str,
        claim: dict[str, Any],
        results: Mapping[int, str] | None = None,
        plain: bool = False,
        heads: ClaimHeads = NO_HEADS,
    ) -> Operation[Turn]:
        """A turn with validated claim parameters (`claim_params`)."""
        # Without heads the turn is the statement it was before they existed.
        with_heads = bool(heads.heads)
        claim = {**claim, **heads.params()} if with_heads else dict(claim)
        limit = claim.pop("limit")
        limited_max = claim.pop("limited_max", limit)
        shape = ("queues" in claim, "kinds" in claim, "claim_bytes" in claim)
        limited = self.limits_in_use
        plain = plain and not results
        statement = self.sql.turn(
            *shape,
            limit,
            limited,
            limited_max,
            failures=bool(failures),
            plain=plain,
            heads=with_heads,
        )
        params = {**claim, "worker": worker, "done": list(succeeded)}
        if failures:
            params |= failure_arrays(failures)
        if not plain:
            params |= result_arrays(results)

        def plan() -> Plan[Turn]:
            (
                (done, failed, statuses, claimed, _, slots, token_in, left_free, walked),
            ) = yield Query(statement, params)
            if len(done) < len(params["done"]):
                # A success held a slot, kept a result or had dependents
                # after all; or a dependent was attached while the statement
                # waited for it (`DEPENDENTS_SEEN`); or its lease was lost,
                # and this finds it gone again.
                seen = set(done)
                rest = [i for i in params["done"] if i not in seen]
                full = self.sql.turn(*shape, 0, False, 0, failures=False)
                kept = {i: results[i] for i in rest if i in results} if results else None
                rest_params = {**claim, "worker": worker, "done": rest, **result_arrays(kept)}
                ((recorded, _, _, _, _, _, _, freed, _),) = yield Query(full, rest_params)
                done = done + recorded
                left_free += freed
            self.limits_in_use = slots
            if slots and not limited and limit > len(claimed):
                # Limits came into use since the last turn: claim the rest
                # of the batch again, limited jobs included, at once.
                more = limit - len(claimed)
                again = self.sql.turn(
                    *shape,
                    more,
                    True,
                    min(limited_max, more),
                    failures=False,
                    plain=True,
                    heads=with_heads,
                )
                nothing = {**claim, "worker": worker, "done": []}
                ((_, _, _, more, _, _, token_in, _, _),) = yield Query(again, nothing)
                claimed = claimed + more
            written = {i: JobStatus(s) for i, s in zip(failed, statuses, strict=True)}
            if len(written) < len(failures):
                # Lost leases; or a dependent was attached while the turn
                # waited for a job (`J_DEPENDENTS_SEEN`): once more, afresh.
                rest = [f for f in failures if f.job_id not in written]
                written |= yield from recorded_failures(self.sql.outcomes, rest)
            jobs = in_claim_order(map(Job.from_json, claimed))
            return Turn(done, written, jobs, token_in, left_free, walked)

        return Operation(plan())

    def settle(
        self,
        succeeded: Sequence[int],
        failures: Sequence[Failure],
        *,
        worker: str,
        results: Mapping[int, str] | None = None,
    ) -> Operation[tuple[list[int], dict[int, JobStatus]]]:
        """A worker's batch of outcomes, in one statement whatever its size: a
        turn of the cycle that claims nothing. Successes are fenced by the
        worker's name, failures by their claim."""
        turn = self.take(succeeded, failures, worker, {"limit": 0}, results)

        def plan() -> Plan[tuple[list[int], dict[int, JobStatus]]]:
            if not succeeded and not failures:
                return [], {}
            done = yield from turn.plan
            return done.completed, done.failed

        return Operation(plan())
