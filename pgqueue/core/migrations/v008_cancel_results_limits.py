"""Migration 8: cancellation, results and limits; its contract step drops
migration 7's claim index."""

from __future__ import annotations

from typing import Final

from ..plans import Plan, Query
from ..schema.predicates import LIMITED_INDEX, UNLIMITED_INDEX
from . import base
from .base import Migration, SchemaNames


def _cancel_results_limits(n: SchemaNames) -> Plan[None]:
    # Cancellation, results and limits (docs/cancel.md, docs/results.md,
    # docs/limits.md). Columns without defaults: adding them rewrites nothing.
    yield base.add_columns(
        n, "table", "cancel_requested_at timestamptz", "result_ttl interval", "limit_key text"
    )
    yield Query(n.render("ALTER TABLE {table} ADD CHECK (result_ttl > interval '0') NOT VALID"))
    # History records cancelled jobs too.
    outcome_checks = Query(
        b"""
SELECT conname FROM pg_constraint
 WHERE conrelid = %s::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE %s""",
        (n.history.as_bytes(None).decode(), "%outcome%"),
    )
    yield from base.replace_checks(
        n.history, outcome_checks, "outcome IN ('succeeded', 'dead', 'cancelled')"
    )
    # The claim index, again: a job held back by a limit is claimed through
    # the limited index, by its key, when a slot is free; the claim of every
    # other job must not read past such jobs, so they leave its index.
    yield from base.check_prebuilt_index(n, UNLIMITED_INDEX)
    yield Query(UNLIMITED_INDEX.create(n))
    # The claim index stays until this migration's contract step
    # (`_drop_claim_index`): the release before reads it.
    yield from base.check_prebuilt_index(n, LIMITED_INDEX)
    yield Query(LIMITED_INDEX.create(n))
    # Results of jobs enqueued with result_ttl, kept until expires_at.
    yield base.create_table(
        n,
        "results",
        """\
    job_id      bigint PRIMARY KEY,
    kind        text NOT NULL,
    queue       text NOT NULL,
    outcome     text NOT NULL CHECK (outcome IN ('succeeded', 'dead', 'cancelled')),
    value       jsonb,
    error       text,
    attempts    integer NOT NULL,
    finished_at timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL""",
    )
    yield Query(n.render("CREATE INDEX IF NOT EXISTS {results_index} ON {results} (expires_at)"))
    # Limits: the most jobs of a key that may run at once, as that many slot
    # rows. A claim takes a free slot (SKIP LOCKED) for each job it takes,
    # and writes the job's id and attempt in it; the statement that records
    # the job's outcome (or the reaper's) frees it, fenced by both.
    yield base.create_table(
        n,
        "limits",
        """\
    limit_key  text PRIMARY KEY,
    max_running integer NOT NULL CHECK (max_running >= 0),
    changed_at timestamptz NOT NULL DEFAULT now()""",
    )
    yield base.create_table(
        n,
        "limit_slots",
        """\
    limit_key text NOT NULL,
    slot      integer NOT NULL,
    job_id    bigint,
    attempt   integer,
    taken_at  timestamptz,
    PRIMARY KEY (limit_key, slot),
    CHECK ((job_id IS NULL) = (attempt IS NULL))""",
    )
    yield from base.grant_like_queue_table(n, n.results, n.limits, n.limit_slots)


def _drop_claim_index(n: SchemaNames) -> Plan[None]:
    yield Query(n.render("DROP INDEX IF EXISTS {claim_index}"))


MIGRATION: Final = Migration(
    8,
    "cancellation, results and limits",
    _cancel_results_limits,
    _drop_claim_index,
    "the claim index of migration 7 ({name}_claim), which {name}_unlimited replaces",
)
