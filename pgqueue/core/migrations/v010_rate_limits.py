"""Migration 10: rate limits."""

from __future__ import annotations

from typing import Final

from ..plans import Plan, Query
from .base import Migration, SchemaNames


def _rate_limits(n: SchemaNames) -> Plan[None]:
    # Rate limits (docs/limits.md): a token bucket per key, beside its
    # concurrency limit, in the same row. A key may have a rate and no
    # limit set (max_running NULL: one job at a time, as without a row).
    yield Query(
        n.render("""
ALTER TABLE {limits}
    ALTER COLUMN max_running DROP NOT NULL,
    ADD COLUMN IF NOT EXISTS per_second  double precision CHECK (per_second > 0),
    ADD COLUMN IF NOT EXISTS burst       integer CHECK (burst >= 1),
    ADD COLUMN IF NOT EXISTS tokens      double precision,
    ADD COLUMN IF NOT EXISTS refilled_at timestamptz,
    ADD CHECK ((per_second IS NULL) = (burst IS NULL))""")
    )


MIGRATION: Final = Migration(10, "rate limits", _rate_limits)
