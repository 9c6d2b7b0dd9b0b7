"""A process that races others to enqueue jobs with the same unique keys (scenario 17).

    python -m tests.reliability.unique_racer

Everything comes from the environment: ``PGQUEUE_DSN`` and ``PGQUEUE_TABLE``
name the queue; ``RACE_ID`` names this racer; ``RACE_KEYS`` is a JSON object
from each key to its rule (``"queued"``, ``"active"``, or a window in
seconds); ``RACE_START`` (epoch seconds, so that every racer starts at once)
and ``RACE_SECONDS`` bound the race; with ``RACE_ROUND_SECONDS``, the keys are
new every round (``KEY.ROUND``, the round counted from the start), so that
every round the racers find them free and fight for them anew;
``RACE_KIND`` is the kind of the jobs (a payload of
``{"seconds": RACE_JOB_SECONDS}`` suits the ``sleep`` kind of the suite's
workers).

Each turn opens a transaction on the racer's own connection, enqueues one
job (``enqueue``) or a few (``enqueue_many``, keys in a random order, a key
maybe twice) with a random ``on_duplicate``, records in ``<table>_races``
what each call returned (or the holder `DuplicateJob` named), in that same
transaction, and then commits or rolls back at random: a record exists if
and only if its enqueue committed. Anything else that goes wrong (a unique
violation, a deadlock) is written to ``<table>_race_errors`` on a separate
connection, and the racer goes on.
"""

from __future__ import annotations

import json
import os
import random
import time
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

import pgqueue
from pgqueue import DuplicateJob, JobSpec

DSN = os.environ["PGQUEUE_DSN"]
TABLE = os.environ["PGQUEUE_TABLE"]
RACER = int(os.environ["RACE_ID"])
KEYS: dict[str, str | float] = json.loads(os.environ["RACE_KEYS"])
START = float(os.environ["RACE_START"])
SECONDS = float(os.environ["RACE_SECONDS"])
KIND = os.environ.get("RACE_KIND", "count")
JOB_SECONDS = float(os.environ.get("RACE_JOB_SECONDS", "0"))
ROUND_SECONDS = float(os.environ.get("RACE_ROUND_SECONDS", "0"))

RACES = sql.Identifier(f"{TABLE}_races")
ERRORS = sql.Identifier(f"{TABLE}_race_errors")
RECORD = sql.SQL(
    "INSERT INTO {} (racer, turn, key, rule, on_duplicate, payload, job_id, raised)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
).format(RACES)


class Rollback(Exception):
    """Raised inside a transaction to roll it back."""


def base(key: str) -> str:
    """The key of `KEYS` that a round's key is made from."""
    return key.partition(".")[0]


def rule(key: str) -> dict[str, Any]:
    """The enqueue arguments of a key's rule."""
    spec = KEYS[base(key)]
    if isinstance(spec, str):
        return {"unique": spec}
    return {"unique_for": timedelta(seconds=spec)}


def turn(
    queue: pgqueue.Queue, conn: psycopg.Connection[Any], rng: random.Random, n: int
) -> tuple[int, bool]:
    """One transaction; returns how many jobs it asked for and whether it committed."""
    keys = [rng.choice(sorted(KEYS)) for _ in range(rng.choice((1, 1, 1, 2, 3)))]
    if ROUND_SECONDS:
        this_round = int((time.time() - START) / ROUND_SECONDS)
        keys = [f"{k}.{this_round}" for k in keys]
    on_duplicate = [rng.choice(("return", "return", "raise", "replace")) for _ in keys]
    if "raise" in on_duplicate and len(set(keys)) < len(keys):
        # A batch that repeats a key and raises names a job of its own, gone
        # with it: not a holder to check. Repeat keys only in batches that do not raise.
        on_duplicate = ["return" if d == "raise" else d for d in on_duplicate]
    payloads = [
        {"seconds": JOB_SECONDS, "racer": RACER, "turn": n, "i": i} for i in range(len(keys))
    ]
    commit = rng.random() < 0.5
    try:
        with conn.transaction():
            raised = None
            ids: list[int | None] = [None] * len(keys)
            try:
                if len(keys) == 1:
                    ids = [
                        queue.enqueue(KIND, payloads[0], unique_key=keys[0],
                                      on_duplicate=on_duplicate[0], conn=conn, **rule(keys[0]))
                    ]  # fmt: skip
                else:
                    specs = [
                        JobSpec(KIND, p, unique_key=k, on_duplicate=d, **rule(k))
                        for k, d, p in zip(keys, on_duplicate, payloads, strict=True)
                    ]
                    ids = list(queue.enqueue_many(specs, conn=conn))
            except DuplicateJob as dup:
                raised = dup
            with conn.cursor() as cur:
                if raised is not None:
                    # The batch wrote nothing; the holder it named is recorded.
                    key = raised.unique_key
                    cur.execute(RECORD, (RACER, n, key, str(KEYS[base(key)]), "raise", None,
                                         raised.existing_id, True))  # fmt: skip
                else:
                    for k, d, p, job_id in zip(keys, on_duplicate, payloads, ids, strict=True):
                        cur.execute(RECORD, (RACER, n, k, str(KEYS[base(k)]), d,
                                             Jsonb(p), job_id, False))  # fmt: skip
            if not commit:
                raise Rollback
    except Rollback:
        pass
    return len(keys), commit


def main() -> None:
    rng = random.Random(RACER * 7919 + int(START))
    errors = psycopg.connect(DSN, autocommit=True)
    with pgqueue.Queue(DSN, table=TABLE, max_connections=1) as queue:
        conn = psycopg.connect(DSN, autocommit=True)
        time.sleep(max(0.0, START - time.time()))
        deadline = START + SECONDS
        n = 0
        while time.time() < deadline:
            n += 1
            try:
                turn(queue, conn, rng, n)
            except Exception as exc:  # every failure is the finding: record it, race on
                errors.execute(
                    sql.SQL("INSERT INTO {} (racer, turn, error) VALUES (%s, %s, %s)").format(
                        ERRORS
                    ),
                    (RACER, n, f"{type(exc).__name__}: {exc}"),
                )
                if conn.closed or conn.broken:
                    conn = psycopg.connect(DSN, autocommit=True)
        conn.close()
    errors.close()


if __name__ == "__main__":
    main()
