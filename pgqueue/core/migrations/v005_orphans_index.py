"""Migration 5: the partial index of orphaned jobs."""

from __future__ import annotations

from typing import Final

from ..plans import Plan, Query
from ..schema.predicates import ORPHANS_INDEX
from .base import Migration, SchemaNames


def _orphans_index(n: SchemaNames) -> Plan[None]:
    # The orphaned jobs waiting to run alone: few, and found without reading
    # the backlog, which a busy worker's look for them would otherwise scan.
    yield Query(ORPHANS_INDEX.create(n))


MIGRATION: Final = Migration(5, "partial index of orphaned jobs", _orphans_index)
