"""Every SQL statement pgqueue runs on a queue table, built once per table.

The schema itself (DDL) is in `pgqueue.core.migrations`.

Identifiers are validated (`validate_table_name`) and quoted with
`psycopg.sql`; values always travel as parameters. Statements are
rendered to bytes when a `Statements` is built, so the hot path neither
composes nor escapes anything, and psycopg can prepare them by text.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from psycopg import sql

from .queue.claim import ClaimSpec, ClaimStatements, claim_statement
from .queue.control import ControlStatements
from .queue.depends import DependencyStatements
from .queue.enqueue import EnqueueStatements
from .queue.inspect import InspectStatements
from .queue.limits import LimitStatements
from .queue.maintenance import MaintenanceStatements
from .queue.operators import OperatorStatements
from .queue.outcomes import OutcomeStatements
from .queue.schedules import ScheduleStatements
from .queue.table import Rendered, Table
from .queue.turn import TurnSpec, turn_statement
from .schema.columns import HISTORY_COLUMNS, INSERT_COLUMNS, JOB_COLUMNS
from .schema.names import TableNames, notification_channel
from .schema.predicates import ORPHANED, UNIQUE_PREDICATES

__all__ = [
    "HISTORY_COLUMNS",
    "INSERT_COLUMNS",
    "JOB_COLUMNS",
    "ORPHANED",
    "UNIQUE_PREDICATES",
    "Statements",
    "notification_channel",
]


class Statements:
    """The statements for one queue table, one object per feature, and the
    claims and turns rendered by shape.

    >>> Statements("app.jobs").table_name
    'app.jobs'
    """

    def __init__(self, table: str, *, history: bool = False) -> None:
        n = TableNames.for_table(table)
        self.table_name = table
        self.history = history
        self.names = n
        self.channel = n.channel
        self.control_channel = n.control_channel
        self.results_channel = n.results_channel
        self.claim_index_name = n.index_name("unlimited")
        self.listen = _listen(n.channel)
        self.listen_control = _listen(n.control_channel)
        self.listen_results = _listen(n.results_channel)
        # The statements of each feature, rendered for this table.
        self._table = model = Table(n, history)
        self.enqueues = EnqueueStatements.of(model)
        self.claims = ClaimStatements.of(model)
        self.outcomes = OutcomeStatements.of(model)
        self.maintenance = MaintenanceStatements.of(model)
        self.control = ControlStatements.of(model)
        self.limits = LimitStatements.of(model)
        self.schedules = ScheduleStatements.of(model)
        self.operators = OperatorStatements.of(model)
        self.inspect = InspectStatements.of(model)
        self.dependencies = DependencyStatements.of(model)
        # Claims and turns, by shape and batch size, rendered when first asked for.
        self._rendered = Rendered(self.RENDERED_MAX)
        # As shown in docs/design.md: a worker's turn and a claim, for the
        # default batch sizes; and for tests and operators, the claim's
        # plan, with no row touched.
        self.worker_turn = self.turn(False, False, False, 100)
        # And as most turns are sent while a snapshot is held (no limits in
        # use, plain successes), with heads (`pgqueue.core.heads`).
        self.worker_turn_with_heads = self.turn(
            False, False, False, 100, False, failures=False, plain=True, heads=True
        )
        self.claim = self.claim_for(False, False, 20)
        self.explain_claim = b"EXPLAIN " + self.claim

    # At most this many claims and turns are kept rendered (batch sizes
    # times shapes); past it, they are rendered anew.
    RENDERED_MAX = 256

    def features(self) -> tuple[Any, ...]:
        """The statements of each feature."""
        return (
            self.enqueues,
            self.claims,
            self.outcomes,
            self.maintenance,
            self.control,
            self.limits,
            self.schedules,
            self.operators,
            self.inspect,
            self.dependencies,
        )

    def every(self) -> dict[str, bytes | dict[Any, bytes]]:
        """Every statement rendered for the table, by name (a dict: by shape),
        each feature's beside this object's own."""
        found = {
            name: value
            for name, value in vars(self).items()
            if isinstance(value, (bytes, dict)) and not name.startswith("_")
        }
        for feature in self.features():
            found.update((f.name, getattr(feature, f.name)) for f in fields(feature))
        return found

    def claim_for(self, queues: bool, kinds: bool, limit: int, limited: bool = True) -> bytes:
        """The claim of up to `limit` jobs, with a ``queues`` and a ``kinds``
        parameter if told so (see `pgqueue.core.ops.QueueCore.claim`); of
        jobs without a limit key only, unless `limited`."""
        spec = ClaimSpec(queues=queues, kinds=kinds, limit=limit, limited=limited)
        return self._rendered.get(spec, lambda: claim_statement(self._table, spec))

    def turn(
        self,
        queues: bool,
        kinds: bool,
        budget: bool,
        limit: int,
        limited: bool = True,
        limited_max: int | None = None,
        *,
        failures: bool = True,
        plain: bool = False,
        heads: bool = False,
    ) -> bytes:
        """A worker's turn (`pgqueue.core.queue.turn`) claiming up to `limit`
        jobs, with ``queues``, ``kinds`` and ``claim_bytes`` parameters if
        told so; jobs with a limit key too if `limited`, at most
        `limited_max` of them (default: `limit`). Without `failures`, it
        records none (and takes no failure parameters); if `plain`, its
        successes are those that hold no limit slot and keep no result (and
        it takes no result parameters). With `heads`, its claim starts each
        level after its head (a ``heads`` parameter: `pgqueue.core.heads`);
        without, it is the claim it was before heads existed."""
        spec = TurnSpec(
            queues=queues,
            kinds=kinds,
            budget=budget,
            limit=limit,
            limited=limited,
            limited_max=limit if limited_max is None else min(limited_max, limit),
            failures=failures,
            plain=plain,
            heads=heads,
        )
        return self._rendered.get(spec, lambda: turn_statement(self._table, spec))


def _listen(channel: str) -> bytes:
    return sql.SQL("LISTEN {}").format(sql.Identifier(channel)).as_bytes(None)
