"""What an earlier release of pgqueue does in a rolling deploy, run by that release's interpreter.

    python -I tests/old_release_app.py DSN TABLE install
    python -I tests/old_release_app.py DSN TABLE enqueue N
    python -I tests/old_release_app.py DSN TABLE drain

Only public names that every release has (`pgqueue.Queue`, `pgqueue.Worker`,
``run(until_empty=True)``), so that one script serves any release.
``drain`` runs a worker with a ``noop`` handler until nothing is ready and
prints, as JSON, where pgqueue was imported from, the ids it ran, and the
plan of each statement the worker sent that locks rows with ``SKIP LOCKED``
(its claims), taken with ``EXPLAIN`` on the worker's own connection just
before the statement ran, with the statement's own parameters.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

import psycopg
from psycopg import sql

explained: list[dict[str, Any]] = []
_seen: set[bytes] = set()
_lock = threading.Lock()
_execute = psycopg.Cursor.execute


def _spying_execute(self: psycopg.Cursor[Any], query: Any, params: Any = None, **kw: Any) -> Any:
    text = query.encode() if isinstance(query, str) else query
    if isinstance(text, sql.Composable):
        text = text.as_bytes(self.connection)
    if b"SKIP LOCKED" in text.upper():
        with _lock:
            first = text not in _seen
            _seen.add(text)
        if first:
            cur = self.connection.cursor()
            _execute(cur, b"EXPLAIN (FORMAT JSON) " + text, params)
            row = cur.fetchone()
            assert row is not None
            explained.append({"query": text.decode(), "plan": row[0]})
    return _execute(self, query, params, **kw)


psycopg.Cursor.execute = _spying_execute  # type: ignore[method-assign]

import pgqueue  # noqa: E402  (after the spy, though it patches a class either way)


def main() -> int:
    dsn, table, action, *rest = sys.argv[1:]
    with pgqueue.Queue(dsn, table=table) as q:
        if action == "install":
            print(json.dumps(q.install()))
        elif action == "enqueue":
            ids = q.enqueue_many([("noop", i) for i in range(int(rest[0]))])
            print(json.dumps(ids))
        elif action == "drain":
            ran: list[int] = []
            worker = pgqueue.Worker(q, {"noop": lambda job: ran.append(job.id)})
            worker.run(until_empty=True)
            print(json.dumps({"pgqueue": pgqueue.__file__, "ran": ran, "explained": explained}))
        else:
            raise SystemExit(f"unknown action {action!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
