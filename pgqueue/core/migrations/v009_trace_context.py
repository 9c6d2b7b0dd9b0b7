"""Migration 9: the trace context of each job."""

from __future__ import annotations

from typing import Final

from ..plans import Plan, Query
from .base import Migration, SchemaNames


def _trace_context(n: SchemaNames) -> Plan[None]:
    # The W3C traceparent of the span that enqueued a job (docs/tracing.md),
    # NULL for jobs enqueued while tracing is off. No default: adding it is a
    # change to the catalog only, and a NULL takes no room in a row.
    yield Query(n.render("ALTER TABLE {table} ADD COLUMN IF NOT EXISTS trace_context text"))


MIGRATION: Final = Migration(9, "the trace context of each job, for tracing", _trace_context)
