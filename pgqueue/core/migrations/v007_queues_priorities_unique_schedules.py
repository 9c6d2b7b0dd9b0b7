"""Migration 7: queues, priorities, unique jobs and schedules; its contract
step drops migration 1's ready index."""

from __future__ import annotations

from typing import Final

from ..plans import Plan, Query
from ..schema.predicates import CLAIM_INDEX, UNIQUE_INDEXES
from . import base
from .base import Migration, SchemaNames


def _queues_priorities_unique_schedules(n: SchemaNames) -> Plan[None]:
    yield from _columns(n)
    yield from _indexes(n)
    yield from _tables(n)


def _columns(n: SchemaNames) -> Plan[None]:
    # Each job belongs to a named queue and has a priority (larger first).
    # Adding a column with a constant default rewrites nothing.
    yield base.add_columns(
        n,
        "table",
        "queue text NOT NULL DEFAULT 'default'",
        "priority smallint NOT NULL DEFAULT 0",
        "unique_key text",
        "unique_scope text",
    )
    # NOT VALID, then VALIDATE: existing rows are read without blocking writes.
    for check in (
        "priority BETWEEN -100 AND 100",
        "unique_scope IN ('queued', 'active', 'window')",
        "(unique_key IS NULL) = (unique_scope IS NULL)",
    ):
        yield Query(n.render("ALTER TABLE {table} ADD CHECK (" + check + ") NOT VALID"))
    yield Query(
        n.render(
            "ALTER TABLE {history} ADD COLUMN IF NOT EXISTS queue text NOT NULL DEFAULT 'default',"
            " ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 0"
        )
    )


def _indexes(n: SchemaNames) -> Plan[None]:
    # The claim index: the pending jobs by queue and priority, then in the
    # order they are due. A claim walks the (queue, priority) levels present
    # and reads each level from its due end (see `pgqueue.core.sql`), so it
    # reads O(batch) entries whatever other queues, lower priorities or
    # future jobs the table holds. It replaces the ready index of migration
    # 1, which it covers for every claim; two indexes would slow every write,
    # but the workers of the release before this one claim through the ready
    # index: it is dropped by this migration's contract step
    # (`_drop_ready_index`), once they are gone.
    yield from base.check_prebuilt_index(n, CLAIM_INDEX)
    yield Query(CLAIM_INDEX.create(n))
    # Unique jobs. A job leaves its index's predicate for good when it
    # starts (queued: its first claim makes attempts > 0, and neither a
    # retry nor a release brings it back to 0) or ends (active: dead, or
    # deleted): no worker statement can collide with a newer duplicate.
    for index in UNIQUE_INDEXES.values():
        yield from base.check_prebuilt_index(n, index)
        yield Query(index.create(n))


def _tables(n: SchemaNames) -> Plan[None]:
    # unique_for: the key is held for a window, even after its job is gone.
    yield base.create_table(
        n,
        "unique_leases",
        """\
    unique_key text PRIMARY KEY,
    job_id     bigint NOT NULL,
    expires_at timestamptz NOT NULL""",
    )
    # Paused queues (a row per queue an operator touched).
    yield base.create_table(
        n,
        "queues",
        """\
    queue      text PRIMARY KEY,
    paused     boolean NOT NULL DEFAULT false,
    changed_at timestamptz NOT NULL DEFAULT now()""",
    )
    # Schedules: what each one enqueues, and the last tick it enqueued.
    yield base.create_table(
        n,
        "schedules",
        """\
    name        text PRIMARY KEY,
    kind        text NOT NULL,
    cron        text,
    every       interval,
    tz          text NOT NULL DEFAULT 'UTC',
    payload     jsonb NOT NULL DEFAULT 'null',
    queue       text NOT NULL DEFAULT 'default',
    priority    smallint NOT NULL DEFAULT 0,
    overlap     boolean NOT NULL DEFAULT true,
    paused      boolean NOT NULL DEFAULT false,
    last_tick   timestamptz,
    last_job_id bigint,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CHECK ((cron IS NULL) <> (every IS NULL))""",
    )
    # Every claim reads the paused queues, enqueues with unique_for write
    # leases, the reaper prunes them, workers tick schedules: a role that may
    # read and write the queue table may use the new tables alike, so that
    # an upgrade does not stop the workers of an application whose runtime
    # role the owner granted the queue table only (docs/reliability.md,
    # "Least privilege").
    yield from base.grant_like_queue_table(n, n.queues, n.unique_leases, n.schedules)


def _drop_ready_index(n: SchemaNames) -> Plan[None]:
    yield Query(n.render("DROP INDEX IF EXISTS {ready_index}"))


MIGRATION: Final = Migration(
    7,
    "queues, priorities, unique jobs and schedules",
    _queues_priorities_unique_schedules,
    _drop_ready_index,
    "the ready index of migration 1 ({name}_ready), which the claim index replaces",
)
