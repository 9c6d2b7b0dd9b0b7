"""Migration 6: the partial index of running jobs, for the reaper."""

from __future__ import annotations

from typing import Final

from ..plans import Plan, Query
from ..schema.predicates import RUNNING_INDEX
from .base import Migration, SchemaNames, check_prebuilt_index


def _running_index(n: SchemaNames) -> Plan[None]:
    # The running jobs only: a handful (workers x batch), whatever else the
    # table holds. The reaper finds expired leases through it; without it,
    # it read the whole table, dead jobs awaiting purge included, and a
    # role's short statement_timeout cancelled it on a big table every time,
    # so that a crashed worker's jobs stayed running for ever.
    #
    # Keyed by locked_at, so that the reaper reads the leases older than its
    # cut-off, not the entries that the jobs claimed and finished since the
    # last vacuum leave behind (keyed by id, it would read them all, at each
    # reap). "locked_at IS NOT NULL" changes nothing it holds (a running job
    # has a lock time) but keeps the planner from using it for the
    # statements that find running jobs by id (a worker's turn, complete,
    # heartbeat): they say nothing of locked_at, so they read the primary
    # key as before. Without it the planner read this index whole for them,
    # and the drain lost a third (docs/performance.md#the-reapers-index).
    #
    # On a big table, an operator builds it beforehand without blocking
    # writes (CREATE INDEX CONCURRENTLY, same name and definition), and this
    # migration keeps it; unless that build failed and left it unusable.
    yield from check_prebuilt_index(n, RUNNING_INDEX)
    yield Query(RUNNING_INDEX.create(n))


MIGRATION: Final = Migration(6, "partial index of running jobs, for the reaper", _running_index)
