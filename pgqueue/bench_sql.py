"""The SQL of ``pgqueue bench`` that is not the queue's own: the seed
design's statements (the baseline it runs beside pgqueue, and the batched
delete of its ceiling) and what it reads around a run. The queue never
runs any of it."""

from __future__ import annotations

from typing import Final

from psycopg import sql

from .core.jobs import validate_table_name

__all__ = ["COMMITS", "WAL_WRITTEN", "SeedStatements"]

# What ``pgqueue bench`` reads around a run: the WAL written (bytes) and the
# transactions committed on the database.
WAL_WRITTEN: Final = b"SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint"
COMMITS: Final = b"SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"


def _render(template: str, **parts: sql.Composable) -> bytes:
    return sql.SQL(template).format(**parts).as_bytes(None)


class SeedStatements:
    """The seed design's SQL, as its article wrote it: the baseline that
    ``pgqueue bench`` runs beside pgqueue (a psycopg port; batches of 20,
    one ``DELETE`` per job), and the batched delete of the bench's ceiling.
    Not used by the queue itself."""

    def __init__(self, table: str) -> None:
        names = {"table": sql.Identifier(*validate_table_name(table))}
        self.create = (
            _render(
                """
CREATE TABLE {table} (
  id           bigserial PRIMARY KEY,
  kind         text NOT NULL,
  payload      jsonb NOT NULL,
  run_at       timestamptz NOT NULL DEFAULT now(),
  attempts     int NOT NULL DEFAULT 0,
  max_attempts int NOT NULL DEFAULT 3,
  locked_at    timestamptz,
  locked_by    text,
  status       text NOT NULL DEFAULT 'pending',
  last_error   text,
  created_at   timestamptz NOT NULL DEFAULT now()
)""",
                **names,
            ),
            _render(
                "CREATE INDEX {index} ON {table} (run_at, id) WHERE status = 'pending'",
                index=sql.Identifier(f"{validate_table_name(table)[-1]}_ready"),
                **names,
            ),
        )
        self.insert = _render("INSERT INTO {table} (kind, payload) VALUES (%s, %s)", **names)
        self.claim = _render(
            """
UPDATE {table} SET status='running', locked_at=now(), locked_by=%s, attempts=attempts+1
 WHERE id IN (
   SELECT id FROM {table}
    WHERE status='pending' AND run_at <= now()
    ORDER BY run_at, id
    LIMIT %s
    FOR UPDATE SKIP LOCKED)
 RETURNING id, kind, payload, attempts, max_attempts""",
            **names,
        )
        self.delete = _render("DELETE FROM {table} WHERE id = %s", **names)
        self.count = _render("SELECT count(*) FROM {table}", **names)
        # The ceiling of `pgqueue bench`: a batch deleted by id, nothing else.
        self.delete_batch = _render("DELETE FROM {table} WHERE id = ANY(%s)", **names)
