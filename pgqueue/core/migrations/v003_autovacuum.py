"""Migration 3: autovacuum by a fixed number of dead rows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ..plans import Plan, Query
from .base import Migration, SchemaNames

# Every job leaves two dead tuples (claim, delete). The default trigger, 20%
# of the table, lets a big table (a large backlog, jobs scheduled far ahead)
# pile up dead entries that every claim steps over; a fixed threshold does
# not (docs/performance.md#autovacuum has the measurements).
AUTOVACUUM_SETTINGS: Final[Mapping[str, str]] = {
    "autovacuum_vacuum_scale_factor": "0",
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_analyze_scale_factor": "0",
    "autovacuum_analyze_threshold": "5000",
}


def _autovacuum(n: SchemaNames) -> Plan[None]:
    settings = ", ".join(f"{k} = {v}" for k, v in AUTOVACUUM_SETTINGS.items())
    yield Query(n.render("ALTER TABLE {table} SET (" + settings + ")"))


MIGRATION: Final = Migration(3, "autovacuum by a fixed number of dead rows", _autovacuum)
