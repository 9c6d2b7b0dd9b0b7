"""Migration 11: the partial index of dead jobs, for operators."""

from __future__ import annotations

from typing import Final

from ..plans import Plan, Query
from ..schema.predicates import DEAD_INDEX
from .base import Migration, SchemaNames, check_prebuilt_index


def _dead_index(n: SchemaNames) -> Plan[None]:
    # The dead jobs only: what an operator lists, counts, retries and purges
    # (the web dashboard, ``pgqueue dead``), read without the backlog. A
    # dashboard that counted dead jobs by reading a table of a million
    # pending ones, once a second, cost a draining worker a fifth of its
    # rate (docs/performance.md#the-web-dashboard-beside-a-draining-worker).
    # A job enters it when it dies and leaves it when it is retried or
    # purged: a job that never dies never touches it.
    #
    # On a big table, build it beforehand with CREATE INDEX CONCURRENTLY
    # (same name and definition); this migration keeps it.
    yield from check_prebuilt_index(n, DEAD_INDEX)
    yield Query(DEAD_INDEX.create(n))


MIGRATION: Final = Migration(11, "partial index of dead jobs, for operators", _dead_index)
