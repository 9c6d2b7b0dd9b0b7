"""Concurrency limits: how fast limited jobs drain, is the limit kept, what other claims pay.

Two parts, both on fresh tables created with ``pgqueue.Queue.install()``
and removed with ``uninstall()`` at the end, even on failure or Ctrl-C.

**drain** (``--skip-drain`` leaves it out): ``--jobs`` trivial jobs are
enqueued with `enqueue_many` and drained by ``--workers`` `AsyncWorker`\\ s
on asyncio in this one process, each with a queue (a pool) of its own, as
worker processes would have; pgqueue's defaults otherwise (concurrency 4,
batch_size 100). Two variants take turns in each of ``--repeat`` runs, so
that a noisy moment hurts both alike:

* ``unlimited``: jobs without a ``limit_key``;
* ``limited``: every job with ``limit_key="bench"`` after
  ``set_limit("bench", --limit)``;
* ``result_ttl`` (``--variants`` names it): jobs without a limit key, enqueued
  with ``result_ttl`` (an hour); the handler returns ``{"n": ...}``, kept
  and announced by the statement that records the job: what keeping
  results costs the drain.

The workers run as in production (``run()``, not ``until_empty``) and are
stopped once every job's handler has run; the drain time ends when they
have returned, their last outcomes written. The handler counts the
handlers running at that moment in the process (every start and end is
counted: an exact maximum, not a sample) and yields to the event loop
(``--job-ms`` sleeps that long instead), so that handlers of several
workers overlap. Beside it a thread samples, every ``--sample-ms``, the
rows ``running`` in the table and the taken slots of the key. All three
maxima must stay at or below the limit; the script exits with status 1 if
one does not.

**claims** (``--skip-claims`` leaves it out): what the claim of jobs
*without* a limit key pays for limits. `Queue.claim`, and a worker's turn
once the table has a limit slot, carry the parts that claim limited jobs
(CTEs ``free``, ``limited`` and ``taken``); a worker's turn leaves them
out while the table has no slot. For each case below a table holds 20,000
ready unlimited jobs, and the claim of 20 with those parts
(`Statements.claim_for`) is measured beside the claim without them
(``limited=False``: the claim as it was before limits):
``EXPLAIN (ANALYZE, BUFFERS)`` of each (rolled back), the buffers of the
three parts alone, and the p50 of ``--claims`` claims of each, taken in
turns and each followed by the queue's ``complete`` statement, on one
autocommit connection (prepared after five runs, as a worker's pool does).

* ``no limits in use``: the limit tables are empty;
* ``10 keys at their limit``: 10 keys with a limit of 10, each with 10
  running jobs holding its slots and 10,000 waiting: 100,000 limited jobs
  that the unlimited claim must not read;
* ``10k keys at their limit``: 10,000 keys (a limit of 1 each, as a key per
  customer), each with a running job holding its slot and one waiting: the
  ``free`` part reads past every taken slot;
* ``100k idle keys``: 100,000 keys with a free slot and no job (keys whose
  jobs are all done).

With no ``--dsn`` (or ``PGQUEUE_DSN``) an embedded PostgreSQL with default
settings is started and removed afterwards.

    python benchmarks/limits.py                          # both parts, ~2-4 min
    python benchmarks/limits.py --skip-claims --repeat 5
    python benchmarks/limits.py --skip-drain --claims 500 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import uuid
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

import anyio
import anyio.lowlevel
import psycopg
from psycopg import sql

import pgqueue
from pgqueue.core.worker import WorkerSettings
from pgqueue.embedded import dsn_or_embedded

KEY = "bench"  # the limit key of the limited drain
RESULT_TTL = timedelta(hours=1)  # of the result_ttl drain
UNLIMITED_READY = 20_000  # ready unlimited jobs in each claims table
CLAIM_BATCH = 20
WARMUP = 10  # unmeasured claims of each statement first (prepared after five)
# The parts of a claim that claim limited jobs, by the names of their CTEs.
# ``free`` runs inside ``limited`` (which alone reads it), so that the
# buffers of ``limited`` count those of ``free`` too: these two are summed.
LIMITED_CTES = ("CTE limited", "CTE taken")


def new_table(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def percentile(values: list[float], pct: float) -> float:
    """The nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


# -- drain -----------------------------------------------------------------------------


@dataclass
class DrainRun:
    """One enqueue-and-drain of one variant."""

    enqueue_s: float
    drain_s: float
    max_handlers: int  # handlers running at once in the process (every start and end counted)
    max_running_rows: int  # rows 'running' with the key (sampled; all rows when unlimited)
    max_taken_slots: int  # taken slots of the key (sampled)
    samples: int
    left: int  # rows left in the table when the workers returned (should be 0)


@dataclass
class Variant:
    name: str
    limit: int | None  # None: jobs without a limit key
    results: bool = False  # enqueued with result_ttl
    runs: list[DrainRun] = field(default_factory=list)

    @property
    def drain_s(self) -> float:
        return statistics.median(r.drain_s for r in self.runs)

    @property
    def enqueue_s(self) -> float:
        return statistics.median(r.enqueue_s for r in self.runs)

    def rate(self, jobs: int) -> float:
        return jobs / self.drain_s

    def maximum(self, what: str) -> int:
        return max(int(getattr(r, what)) for r in self.runs)


class Sampler:
    """A thread that counts, on a connection of its own, the running rows (of the
    key, when limited) and the key's taken slots, keeping the largest of each."""

    def __init__(self, dsn: str, table: str, limited: bool, every: float) -> None:
        t = sql.Identifier(table)
        slots = sql.Identifier(f"{table}_limit_slots")
        # `locked_at IS NOT NULL`: read through the running index, not the table.
        of_key = sql.SQL(" AND limit_key = %(key)s") if limited else sql.SQL("")
        self.query = sql.SQL(
            "SELECT (SELECT count(*) FROM {t} WHERE status = 'running'"
            " AND locked_at IS NOT NULL{of_key}),"
            " (SELECT count(*) FROM {slots} WHERE limit_key = %(key)s AND job_id IS NOT NULL)"
        ).format(t=t, slots=slots, of_key=of_key)
        self.dsn, self.every = dsn, every
        self.max_rows = self.max_slots = self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self._stop.is_set():
                    row = conn.execute(self.query, {"key": KEY}).fetchone()
                    assert row is not None
                    self.max_rows = max(self.max_rows, row[0])
                    self.max_slots = max(self.max_slots, row[1])
                    self.samples += 1
                    self._stop.wait(self.every)
        except BaseException as exc:  # reported by the run, not lost in the thread
            self.error = exc

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def drain_once(dsn: str, args: argparse.Namespace, variant: Variant) -> DrainRun:
    """Enqueue ``args.jobs`` jobs (limited or not) on a fresh table and drain them."""
    table = new_table("limitsbench")
    jobs = args.jobs
    limit = variant.limit
    key = KEY if limit is not None else None
    ttl = RESULT_TTL if variant.results else None
    specs = [pgqueue.JobSpec("noop", {"n": i}, limit_key=key, result_ttl=ttl) for i in range(jobs)]
    with pgqueue.Queue(dsn, table=table, max_connections=2) as q:
        try:
            q.install()
            if limit is not None:
                q.set_limit(KEY, limit)
            start = time.perf_counter()
            q.enqueue_many(specs)
            enqueue_s = time.perf_counter() - start
            with Sampler(dsn, table, limit is not None, args.sample_ms / 1000) as sampler:
                drain_s, max_handlers = anyio.run(drain_async, dsn, table, args)
            if sampler.error is not None:
                raise sampler.error
            left = q.stats().by_status
            return DrainRun(
                enqueue_s,
                drain_s,
                max_handlers,
                sampler.max_rows,
                sampler.max_slots,
                sampler.samples,
                sum(left.values()),
            )
        finally:
            q.uninstall()


async def drain_async(dsn: str, table: str, args: argparse.Namespace) -> tuple[float, int]:
    """Run ``args.workers`` workers until every job's handler has run; the drain's
    seconds and the most handlers that ran at once."""
    jobs, pause = args.jobs, args.job_ms / 1000
    counts = {"running": 0, "max": 0, "done": 0}
    workers: list[pgqueue.AsyncWorker] = []

    async def noop(job: pgqueue.Job) -> dict[str, int]:
        counts["running"] += 1
        counts["max"] = max(counts["max"], counts["running"])
        try:
            if pause:
                await anyio.sleep(pause)
            else:
                await anyio.lowlevel.checkpoint()  # let other handlers start meanwhile
        finally:
            counts["running"] -= 1
        counts["done"] += 1
        if counts["done"] == jobs:
            for worker in workers:
                worker.stop()
        return {"n": job.payload["n"]}  # kept only for a job with result_ttl

    async with AsyncExitStack() as stack:
        for i in range(args.workers):
            queue = await stack.enter_async_context(pgqueue.AsyncQueue(dsn, table=table))
            workers.append(
                pgqueue.AsyncWorker(
                    queue,
                    {"noop": noop},
                    concurrency=args.concurrency,
                    batch_size=args.batch_size,
                    poll_interval=args.poll_interval,
                    handle_signals=False,
                    name=f"limitsbench-{i}",
                )
            )
        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for worker in workers:
                tg.start_soon(worker.run)
        return time.perf_counter() - start, counts["max"]


VARIANTS = ("unlimited", "limited", "result_ttl")


def drain(dsn: str, args: argparse.Namespace) -> list[Variant]:
    known = {
        "unlimited": Variant("unlimited", None),
        "limited": Variant(f"limited {args.limit}", args.limit),
        "result_ttl": Variant("result_ttl", None, results=True),
    }
    # The unlimited drain first: the others' ratios are to it.
    variants = [known["unlimited"], *(known[n] for n in args.variants if n != "unlimited")]
    for repeat in range(args.repeat):
        for variant in variants:
            if not args.json:
                print(f"run {repeat + 1}/{args.repeat}: {variant.name}...", file=sys.stderr)
            variant.runs.append(drain_once(dsn, args, variant))
    return variants


def drain_report(variants: list[Variant], args: argparse.Namespace) -> list[str]:
    base = variants[0].rate(args.jobs)
    lines = [
        f"drain: {args.jobs:,} jobs ({'trivial' if not args.job_ms else f'{args.job_ms} ms'}), "
        f"{args.workers} asyncio workers in one process (concurrency {args.concurrency}, "
        f"batch_size {args.batch_size}, poll_interval {args.poll_interval}), "
        f"median of {args.repeat} run(s)",
        "",
        f"{'variant':<12}{'enqueue s':>10}{'drain s':>9}{'jobs/s':>9}{'vs unlimited':>14}"
        f"{'max handlers':>14}{'max rows':>10}{'max slots':>11}",
    ]
    for v in variants:
        slots = "-" if v.limit is None else f"{v.maximum('max_taken_slots')}"
        lines.append(
            f"{v.name:<12}{v.enqueue_s:>10.3f}{v.drain_s:>9.3f}{v.rate(args.jobs):>9,.0f}"
            f"{v.rate(args.jobs) / base:>13.2f}x{v.maximum('max_handlers'):>14}"
            f"{v.maximum('max_running_rows'):>10}{slots:>11}"
        )
    lines += [
        "",
        "max handlers: handlers running at once in the process (each start and end counted);",
        "max rows / slots: largest 'running' rows (of the key) and taken slots seen by a "
        f"sampler every {args.sample_ms} ms; maxima over all runs",
    ]
    return lines


def limit_kept(variants: list[Variant]) -> bool:
    return all(
        max(r.max_handlers, r.max_running_rows, r.max_taken_slots) <= v.limit and r.left == 0
        for v in variants
        if v.limit is not None
        for r in v.runs
    )


# -- claims ----------------------------------------------------------------------------


@dataclass
class ClaimCase:
    name: str
    keys: int = 0  # limit keys
    limit: int = 1  # each key's limit (set_limit when above 1)
    running: int = 0  # running jobs per key, each holding a slot
    waiting: int = 0  # pending jobs per key


CLAIM_CASES = (
    ClaimCase("no limits in use"),
    ClaimCase("10 keys at their limit", keys=10, limit=10, running=10, waiting=10_000),
    ClaimCase("10k keys at their limit", keys=10_000, limit=1, running=1, waiting=1),
    ClaimCase("100k idle keys", keys=100_000),
)


@dataclass
class ClaimResult:
    case: ClaimCase
    buffers: int  # shared buffers the claim touches
    limited_buffers: int  # of which the CTEs free, limited and taken
    buffers_without: int  # the claim without those CTEs
    p50_ms: float
    p50_without_ms: float
    p99_ms: float
    p99_without_ms: float


def fill_claims_table(conn: psycopg.Connection[Any], q: pgqueue.Queue, case: ClaimCase) -> None:
    names = {
        "t": sql.Identifier(q.table),
        "slots": sql.Identifier(f"{q.table}_limit_slots"),
        "limits": sql.Identifier(f"{q.table}_limits"),
    }

    def run(text: str, params: dict[str, Any] | None = None) -> None:
        conn.execute(sql.SQL(text).format(**names), params)

    run(
        "INSERT INTO {t} (kind, payload) SELECT 'noop', jsonb_build_object('n', g)"
        " FROM generate_series(1, %(n)s) AS g",
        {"n": UNLIMITED_READY},
    )
    if case.keys:
        keys = {"keys": case.keys, "limit": case.limit}
        if case.limit != 1:
            run(
                "INSERT INTO {limits} (limit_key, max_running)"
                " SELECT 'k' || g, %(limit)s FROM generate_series(1, %(keys)s) AS g",
                keys,
            )
        run(
            "INSERT INTO {slots} (limit_key, slot) SELECT 'k' || g, s"
            " FROM generate_series(1, %(keys)s) AS g, generate_series(1, %(limit)s) AS s",
            keys,
        )
    if case.running:
        # Jobs a worker holds: running, each stamped into a slot of its key.
        run(
            "INSERT INTO {t} (kind, limit_key, status, attempts, locked_at, locked_by)"
            " SELECT 'noop', 'k' || g, 'running', 1, now(), 'holder'"
            "   FROM generate_series(1, %(keys)s) AS g, generate_series(1, %(running)s) AS r",
            {"keys": case.keys, "running": case.running},
        )
        run(
            "UPDATE {slots} AS s SET job_id = r.id, attempt = 1, taken_at = now()"
            "  FROM (SELECT id, limit_key,"
            "               row_number() OVER (PARTITION BY limit_key ORDER BY id) AS slot"
            "          FROM {t} WHERE status = 'running') AS r"
            " WHERE s.limit_key = r.limit_key AND s.slot = r.slot"
        )
    if case.waiting:
        run(
            "INSERT INTO {t} (kind, limit_key)"
            " SELECT 'noop', 'k' || g FROM generate_series(1, %(keys)s) AS g,"
            "      generate_series(1, %(waiting)s) AS w",
            {"keys": case.keys, "waiting": case.waiting},
        )
    for table in ("t", "slots", "limits"):
        run("VACUUM ANALYZE {" + table + "}")


def buffers(node: dict[str, Any]) -> int:
    return int(node["Shared Hit Blocks"] + node["Shared Read Blocks"])


def explain(conn: psycopg.Connection[Any], statement: bytes) -> tuple[int, int]:
    """The shared buffers a claim touches (rolled back), and those of its limited CTEs."""
    with conn.transaction(force_rollback=True):
        row = conn.execute(
            b"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, {"worker": "bench"}
        ).fetchone()
    assert row is not None
    root = row[0][0]["Plan"]
    parts = sum(
        buffers(child)
        for child in root.get("Plans", [])
        if child.get("Subplan Name") in LIMITED_CTES
    )
    return buffers(root), parts


def measure_claims(dsn: str, case: ClaimCase, claims: int) -> ClaimResult:
    table = new_table("limitsclaims")
    with pgqueue.Queue(dsn, table=table, max_connections=1) as q:
        try:
            q.install()
            with psycopg.connect(dsn, autocommit=True) as conn:
                fill_claims_table(conn, q, case)
                claim = q.core.sql.claim_for(False, False, CLAIM_BATCH)
                plain = q.core.sql.claim_for(False, False, CLAIM_BATCH, limited=False)
                total, parts = explain(conn, claim)
                total_without, _ = explain(conn, plain)
                times: dict[bytes, list[float]] = {claim: [], plain: []}
                complete = q.core.sql.outcomes.complete
                for i in range(WARMUP + claims):
                    for statement, samples in times.items():
                        start = time.perf_counter()
                        ids = [r[0] for r in conn.execute(statement, {"worker": "bench"})]
                        elapsed = time.perf_counter() - start
                        if len(ids) != CLAIM_BATCH:
                            raise RuntimeError(f"{case.name}: a claim took {len(ids)} jobs")
                        conn.execute(complete, {"done": ids, "r_id": [], "r_value": []})
                        if i >= WARMUP:
                            samples.append(elapsed * 1000)
            return ClaimResult(
                case,
                total,
                parts,
                total_without,
                percentile(times[claim], 50),
                percentile(times[plain], 50),
                percentile(times[claim], 99),
                percentile(times[plain], 99),
            )
        finally:
            q.uninstall()


def claims_report(results: list[ClaimResult], args: argparse.Namespace) -> list[str]:
    lines = [
        f"claims of {CLAIM_BATCH} from {UNLIMITED_READY:,} ready unlimited jobs: the claim, "
        f"and the claim without its parts for limited jobs; p50 of {args.claims} each, in turns",
        "",
        f"{'case':<26}{'buffers':>9}{'of which limits':>17}{'without':>9}"
        f"{'p50 ms':>9}{'without':>9}{'ratio':>7}{'p99 ms':>9}{'without':>9}",
    ]
    for r in results:
        lines.append(
            f"{r.case.name:<26}{r.buffers:>9}{r.limited_buffers:>17}{r.buffers_without:>9}"
            f"{r.p50_ms:>9.3f}{r.p50_without_ms:>9.3f}{r.p50_ms / r.p50_without_ms:>7.2f}"
            f"{r.p99_ms:>9.3f}{r.p99_without_ms:>9.3f}"
        )
    lines += [
        "",
        "buffers: EXPLAIN (ANALYZE, BUFFERS), rolled back; of which limits: the CTEs "
        "free, limited and taken",
    ]
    return lines


# -- the command -----------------------------------------------------------------------


def variants_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"variants are {', '.join(VARIANTS)}; got {text!r}")
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--dsn",
        default=os.environ.get("PGQUEUE_DSN"),
        help="default: $PGQUEUE_DSN, else an embedded server",
    )
    p.add_argument("--jobs", type=int, default=50_000, help="jobs per drain (default 50,000)")
    p.add_argument("--limit", type=int, default=10, help="the key's limit (default 10)")
    p.add_argument("--workers", type=int, default=4, help="asyncio workers (default 4)")
    p.add_argument(
        "--concurrency",
        type=int,
        default=WorkerSettings.concurrency,
        help=f"each worker's concurrency (default {WorkerSettings.concurrency})",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=WorkerSettings.batch_size,
        help=f"each worker's claim batch (default {WorkerSettings.batch_size})",
    )
    p.add_argument(
        "--poll-interval",
        type=float,
        default=WorkerSettings.poll_interval,
        help=f"each worker's poll interval, seconds (default {WorkerSettings.poll_interval})",
    )
    p.add_argument("--job-ms", type=float, default=0, help="each handler sleeps this long")
    p.add_argument("--repeat", type=int, default=3, help="drains of each variant; medians count")
    p.add_argument("--sample-ms", type=float, default=5, help="running rows sampled this often")
    p.add_argument("--claims", type=int, default=300, help="measured claims of each statement")
    p.add_argument(
        "--variants",
        type=variants_list,
        default=["unlimited", "limited"],
        help="drains beside the unlimited one: limited, result_ttl (default: limited)",
    )
    p.add_argument("--skip-drain", action="store_true", help="measure the claims only")
    p.add_argument("--skip-claims", action="store_true", help="measure the drain only")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    if min(args.jobs, args.limit, args.workers, args.concurrency, args.batch_size) < 1:
        p.error("--jobs, --limit, --workers, --concurrency and --batch-size must be at least 1")
    if args.repeat < 1 or args.claims < 1 or args.job_ms < 0 or args.sample_ms <= 0:
        p.error("--repeat and --claims must be at least 1, --job-ms >= 0, --sample-ms > 0")
    if (WARMUP + args.claims) * CLAIM_BATCH * 2 > UNLIMITED_READY:
        p.error(f"--claims is at most {UNLIMITED_READY // (2 * CLAIM_BATCH) - WARMUP}")

    variants: list[Variant] = []
    claims: list[ClaimResult] = []
    with dsn_or_embedded(args.dsn) as dsn:
        if not args.skip_drain:
            variants = drain(dsn, args)
        if not args.skip_claims:
            for case in CLAIM_CASES:
                if not args.json:
                    print(f"claims: {case.name}...", file=sys.stderr)
                claims.append(measure_claims(dsn, case, args.claims))
    where = (
        "the server at --dsn / PGQUEUE_DSN"
        if args.dsn
        else "an embedded PostgreSQL (default settings)"
    )
    if args.json:
        out: dict[str, Any] = {"server": where, "settings": vars(args)}
        if variants:
            out["drain"] = {
                v.name: {
                    "limit": v.limit,
                    "enqueue_s": v.enqueue_s,
                    "drain_s": v.drain_s,
                    "jobs_per_s": v.rate(args.jobs),
                    "ratio_to_unlimited": v.rate(args.jobs) / variants[0].rate(args.jobs),
                    "runs": [asdict(r) for r in v.runs],
                }
                for v in variants
            }
            out["limit_kept"] = limit_kept(variants)
        if claims:
            out["claims"] = [asdict(r) for r in claims]
        print(json.dumps(out, indent=2))
    else:
        lines = [f"limits benchmark, on {where}", ""]
        if variants:
            lines += [*drain_report(variants, args), ""]
        if claims:
            lines += claims_report(claims, args)
        print("\n".join(lines).rstrip())
    if variants and not limit_kept(variants):
        print("the limit was exceeded, or jobs were left behind", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
