"""Migration 12: heap pages keep room for the claim's update."""

from __future__ import annotations

from typing import Final

from ..plans import Plan, Query
from .base import Migration, SchemaNames

# The share of each heap page that inserts fill, leaving the rest for the
# claim's new version of each row. The claim is never a HOT update (it
# changes status, in every partial index's predicate), but with room on the
# page its new version stays there: PostgreSQL then logs only the bytes
# that changed (attempts to locked_by) instead of the whole row, and no
# extra lock record for the move to another page. A claimed row is larger
# than a pending one (locked_at, locked_by), so a page must keep more than
# half its room free. Measured with benchmarks/wal.py (50,000 no-op jobs,
# asyncio): 493 B of WAL per job to claim and delete at 100, 393 at 50, 382
# at 40 and at 30 (docs/performance.md#wal-per-job).
FILLFACTOR: Final = 40


def _fillfactor(n: SchemaNames) -> Plan[None]:
    # Pages already full keep their rows; new ones are filled to FILLFACTOR.
    # Takes a SHARE UPDATE EXCLUSIVE lock: reads and writes go on.
    yield Query(n.render(f"ALTER TABLE {{table}} SET (fillfactor = {FILLFACTOR})"))


MIGRATION: Final = Migration(
    12, "heap pages keep room for the claim's update: less WAL per job", _fillfactor
)
