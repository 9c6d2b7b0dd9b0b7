"""Real handler workloads: does ``concurrency=N`` run N handlers, whatever they do?

Each case (`workload_kit.make_cases`) enqueues jobs whose handler sleeps
(an I/O-bound job: an e-mail, an HTTP call) or computes for a given time,
and runs them on every pgqueue backend with plain (``def``) and
``async def`` handlers:

* ``sync``: a `pgqueue.Worker`, plain handlers only (it refuses
  ``async def`` ones);
* ``asyncio`` and ``trio``: an `AsyncWorker`, with both (a plain handler
  runs in a thread).

Every handler notes its start and end (`workload_kit.Tracker`), which gives
the peak of handlers running at once (each start and end counted, not
sampled) and the run's time, from the first handler's start to the last
one's end: worker start-up and the last outcomes' writes are left out.
Efficiency is jobs/s over the ideal, the rate if every runner (or every
slot of the limit) were busy all the time: concurrency / mean duration.

The cases (``--cases``, all by default):

* ``uniform``: 1,000 jobs of 20 ms, concurrency 16 (ideal 800/s);
* ``burst``: 30 bursts of 4 jobs of 100 ms, one every 200 ms, enqueued
  (``enqueue_many``, committed) by a producer thread on its own connection
  while the worker runs, concurrency 4: p50 / p99 / max of the time from
  the commit's return to the handler's start;
* ``mixed``: 600 jobs, 95 % of 5 ms and 5 % of 1 s in a fixed shuffled
  order, concurrency 8 (ideal 8 / 54.75 ms = 146/s);
* ``limit``: 500 jobs of 10 ms with ``limit_key`` after ``set_limit(key,
  10)``, concurrency 16 (ideal 1,000/s);
* ``limit-trivial``: 2,000 trivial jobs of the same key (jobs/s only);
* ``cpu``: 1,000 jobs of 2 ms of pure-Python work (calibrated here, in
  this process), run by ``pgqueue worker workload_target:worker
  --processes N`` for each of ``--processes`` (1 and 2) as a subprocess,
  stopped with SIGTERM once every job has run; ideal N x 500/s. Skipped,
  with a note, when the installed ``pgqueue worker`` has no
  ``--processes``.

The peers, pgqueuer and procrastinate (`PEER_REQUIREMENTS`), run the
``uniform`` and ``burst`` cases in the same run: they are installed into a
venv of their own (``--peers-venv``, made on first use) and each run is a
subprocess there (`workload_peers.py`) on a database of its own, created
and dropped around it. ``--no-peers`` leaves them out.

The contenders take turns within each of ``--repeat`` rounds (the cases
too), so that a noisy moment hurts all alike; the table shows medians.
Every pgqueue run has a fresh table (``workload_…``), dropped afterwards.
With no ``--dsn`` (or ``PGQUEUE_DSN``) an embedded PostgreSQL with default
settings is started and removed afterwards.

    python benchmarks/workload.py                          # everything, ~10 min here
    python benchmarks/workload.py --cases uniform,burst --repeat 5
    python benchmarks/workload.py --smoke --no-peers --json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from workload_kit import (
    KIND,
    LIMIT_KEY,
    Case,
    Tracker,
    calibrate_cpu_loops,
    make_cases,
    percentile,
    produce_bursts,
)

import pgqueue
from pgqueue.bench import missing_backends
from pgqueue.embedded import dsn_or_embedded

HERE = Path(__file__).resolve().parent
PEER_REQUIREMENTS = ("pgqueuer[asyncpg]==1.6.0", "procrastinate==3.10.0")
PEER_CASES = ("uniform", "burst")
PEER_HANDLERS = {"pgqueuer": ("async",), "procrastinate": ("def", "async")}
BACKEND_HANDLERS = {"sync": ("def",), "asyncio": ("def", "async"), "trio": ("def", "async")}
HANDLER_LABELS = {"def": "def", "async": "async def"}


@dataclass
class Contender:
    name: str
    handler: str  # "def" or "async"
    run: Callable[[Case], dict[str, Any]]
    processes: int = 1  # the ideal of a CPU-bound case is per process
    runs: list[dict[str, Any]] = field(default_factory=list)


def overtime(case: Case) -> float:
    """Seconds after which a run is stopped as broken: every job one after
    another, and a minute more."""
    return sum(case.durations) + 60


# -- pgqueue ---------------------------------------------------------------------------


def specs(case: Case, numbers: list[int]) -> list[pgqueue.JobSpec]:
    key = LIMIT_KEY if case.limit else None
    return [pgqueue.JobSpec(KIND, {"n": n}, limit_key=key) for n in numbers]


@contextmanager
def bursts(case: Case, dsn: str, q: pgqueue.Queue, tracker: Tracker) -> Iterator[None]:
    """While the block runs the worker: the burst case's producer thread,
    enqueueing with ``q``'s statements on a connection of its own."""
    if not case.burst_size:
        yield
        return
    failed: list[BaseException] = []

    def produce() -> None:
        try:
            with psycopg.connect(dsn) as conn:

                def enqueue(numbers: list[int]) -> None:
                    q.enqueue_many(specs(case, numbers), conn=conn)
                    conn.commit()

                produce_bursts(case, enqueue, tracker)
        except BaseException as exc:
            failed.append(exc)
            tracker.on_done()  # stop the worker: the run has failed

    thread = threading.Thread(target=produce, name="workload-producer")
    thread.start()
    try:
        yield
    finally:
        thread.join()
    if failed:
        raise failed[0]


@contextmanager
def deadline(case: Case, stop: Callable[[], object]) -> Iterator[None]:
    """Stop the worker after `overtime`: the run then fails (not every job ran)."""
    timer = threading.Timer(overtime(case), stop)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def sync_handler(case: Case, tracker: Tracker) -> Callable[[pgqueue.Job], None]:
    def work(job: pgqueue.Job) -> None:
        n = job.payload["n"]
        tracker.start(n)
        try:
            if seconds := case.duration(n):
                time.sleep(seconds)
        finally:
            tracker.end(n)

    return work


def async_handler(case: Case, tracker: Tracker) -> Callable[[pgqueue.Job], Any]:
    async def work(job: pgqueue.Job) -> None:
        n = job.payload["n"]
        tracker.start(n)
        try:
            await anyio.sleep(case.duration(n))  # 0: a checkpoint
        finally:
            tracker.end(n)

    return work


def run_pgqueue(dsn: str, backend: str, handler: str, case: Case) -> dict[str, Any]:
    table = f"workload_{uuid.uuid4().hex[:10]}"
    tracker = Tracker(case.jobs)
    work = sync_handler(case, tracker) if handler == "def" else async_handler(case, tracker)
    with pgqueue.Queue(dsn, table=table) as q:
        try:
            q.install()
            if case.limit:
                q.set_limit(LIMIT_KEY, case.limit)
            if not case.burst_size:
                q.enqueue_many(specs(case, list(range(case.jobs))))
            if backend == "sync":
                worker = pgqueue.Worker(
                    q, {KIND: work}, concurrency=case.concurrency, handle_signals=False
                )
                tracker.on_done = worker.stop
                with bursts(case, dsn, q, tracker), deadline(case, worker.stop):
                    worker.run()
            else:

                async def serve() -> None:
                    async with pgqueue.AsyncQueue(dsn, table=table) as aq:
                        worker = pgqueue.AsyncWorker(
                            aq, {KIND: work}, concurrency=case.concurrency, handle_signals=False
                        )
                        tracker.on_done = worker.stop  # callable from any thread
                        with bursts(case, dsn, q, tracker), deadline(case, worker.stop):
                            await worker.run()

                anyio.run(serve, backend=backend)
            return tracker.result()
        finally:
            q.uninstall()


# -- the peers -------------------------------------------------------------------------


def peers_python(venv: Path) -> Path:
    """The peers' venv's interpreter, the venv made (or remade) when it
    does not hold `PEER_REQUIREMENTS` yet."""
    python = venv / "bin" / "python"
    marker = venv / "workload-requirements.txt"
    wanted = "\n".join(PEER_REQUIREMENTS)
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    print(f"installing {', '.join(PEER_REQUIREMENTS)} into {venv}...", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *PEER_REQUIREMENTS], check=True)
    marker.write_text(wanted)
    return python


def run_peer(
    dsn: str, python: Path, peer: str, handler: str, smoke: bool, case: Case
) -> dict[str, Any]:
    """One run in the peers' venv, on a database made for it and dropped after."""
    database = f"workload_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    try:
        where = make_conninfo(dsn, dbname=database)
        command = [str(python), str(HERE / "workload_peers.py"), peer, handler, case.name, where]
        if smoke:
            command.append("--smoke")
        done = subprocess.run(command, capture_output=True, text=True, timeout=overtime(case) + 60)
        if done.returncode:
            raise RuntimeError(f"{peer} failed:\n{done.stderr[-3000:]}")
        result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
        return result
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
            )


# -- CPU-bound, through `pgqueue worker --processes N` ---------------------------------


def processes_missing() -> str | None:
    """Why the CPU case cannot run here, if it cannot."""
    done = subprocess.run(
        [sys.executable, "-m", "pgqueue", "worker", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    if "--processes" not in done.stdout:
        return (
            "the installed `pgqueue worker` has no --processes option (see `pgqueue worker --help`)"
        )
    return None


def run_cli(dsn: str, processes: int, loops: int, case: Case) -> dict[str, Any]:
    table = f"workload_{uuid.uuid4().hex[:10]}"
    with (
        pgqueue.Queue(dsn, table=table) as q,
        tempfile.NamedTemporaryFile("r", prefix="workload-", suffix=".log") as log,
    ):
        try:
            q.install()
            q.enqueue_many(specs(case, list(range(case.jobs))))
            env = {
                **os.environ,
                "WORKLOAD_DSN": dsn,
                "WORKLOAD_TABLE": table,
                "WORKLOAD_LOOPS": str(loops),
                "WORKLOAD_LOG": log.name,
                "WORKLOAD_CONCURRENCY": str(case.concurrency),
            }
            command = [
                sys.executable,
                "-m",
                "pgqueue",
                "worker",
                "workload_target:worker",
                "--processes",
                str(processes),
                "--log-level",
                "WARNING",
            ]
            supervisor = subprocess.Popen(command, cwd=HERE, env=env)
            try:
                lines = wait_for_lines(log.name, case.jobs, supervisor, overtime(case))
            finally:
                supervisor.send_signal(signal.SIGTERM)
                try:
                    supervisor.wait(30)
                except subprocess.TimeoutExpired:
                    supervisor.kill()
                    supervisor.wait()
            return intervals_result(lines, case.jobs)
        finally:
            q.uninstall()


def wait_for_lines(
    path: str, count: int, process: subprocess.Popen[bytes], timeout: float
) -> list[str]:
    """The log's lines once it has ``count`` of them."""
    end = time.monotonic() + timeout
    while True:
        lines = Path(path).read_text().splitlines()
        if len(lines) >= count:
            return lines
        if process.poll() is not None:
            raise RuntimeError(
                f"`pgqueue worker` exited ({process.returncode}) after {len(lines)} of {count} jobs"
            )
        if time.monotonic() > end:
            raise RuntimeError(f"{len(lines)} of {count} jobs ran within {timeout:g} s")
        time.sleep(0.05)


def intervals_result(lines: list[str], jobs: int) -> dict[str, Any]:
    """A run (as `Tracker.result`) from the handlers' log: pid, start, end."""
    spans = [tuple(map(float, line.split()[1:])) for line in lines]
    edges = sorted([(end, -1) for _, end in spans] + [(start, 1) for start, _ in spans])
    running = peak = 0
    for _, step in edges:  # an end before a start at the same instant
        running += step
        peak = max(peak, running)
    pids = {line.split()[0] for line in lines}
    return {
        "jobs": jobs,
        "seconds": max(e for _, e in spans) - min(s for s, _ in spans),
        "peak": peak,
        "busy_seconds": sum(end - start for start, end in spans),
        "latencies_ms": [],
        "processes_seen": len(pids),
    }


# -- the run ---------------------------------------------------------------------------


def leave_stuck_threads_behind(wait: float = 2.0) -> None:
    """Exit now, with a note, if threads outlive the report: at `c84039d` a
    worker's LISTEN thread that hears a notification as its event loop
    closes waits for that loop forever (`Notifier._listen` in
    pgqueue/aio/worker/notifier.py), which would keep this process alive
    after its report (seen once in a full run)."""
    end = time.monotonic() + wait
    stuck = []
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(max(0.0, end - time.monotonic()))
            if thread.is_alive():
                stuck.append(thread.name)
    if stuck:
        print(f"exiting without {len(stuck)} thread(s) still waiting: {', '.join(stuck)}",
              file=sys.stderr)  # fmt: skip
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def contenders(
    args: argparse.Namespace, dsn: str, case: Case, peers: Path | None, loops: int
) -> list[Contender]:
    if case.cpu_bound:
        return [
            Contender(f"pgqueue --processes {n}", "def", partial(run_cli, dsn, n, loops), n)
            for n in args.processes
        ]
    found = [
        Contender(f"pgqueue {backend}", handler, partial(run_pgqueue, dsn, backend, handler))
        for backend in args.backends
        for handler in BACKEND_HANDLERS[backend]
    ]
    if peers is not None and case.name in PEER_CASES:
        for requirement in PEER_REQUIREMENTS:
            peer, version = requirement.split("==")
            peer = peer.partition("[")[0]
            for handler in PEER_HANDLERS[peer]:
                found.append(
                    Contender(
                        f"{peer} {version}",
                        handler,
                        partial(run_peer, dsn, peers, peer, handler, args.smoke),
                    )
                )
    return found


def summary(case: Case, contender: Contender) -> dict[str, Any]:
    runs = contender.runs
    seconds = statistics.median(r["seconds"] for r in runs)
    ideal = case.ideal * contender.processes if case.ideal else None
    out: dict[str, Any] = {
        "contender": contender.name,
        "handler": contender.handler,
        "jobs_per_s": case.jobs / seconds,
        "ideal_jobs_per_s": ideal,
        "efficiency": case.jobs / seconds / ideal if ideal else None,
        "peak": max(r["peak"] for r in runs),
        # What the handlers really took, and the share of the slots' time
        # they ran: efficiency below busy is the worker's gaps, busy below 1
        # with a mean above the nominal one is the handlers' own overrun.
        "mean_ms": statistics.median(1000 * r["busy_seconds"] / case.jobs for r in runs),
        "busy": statistics.median(
            r["busy_seconds"] / r["seconds"] / (case.slots * contender.processes) for r in runs
        ),
        "runs": runs,
    }
    if case.burst_size:
        for pct in (50, 99, 100):
            name = "max_ms" if pct == 100 else f"p{pct}_ms"
            out[name] = statistics.median(percentile(r["latencies_ms"], pct) for r in runs)
    return out


def case_table(case: Case, rows: list[dict[str, Any]], repeat: int) -> list[str]:
    per = " per process" if case.cpu_bound else ""
    ideal = f"ideal {case.ideal:,.0f} jobs/s{per}" if case.ideal else "no ideal rate"
    lines = [f"{case.title}; {ideal}; median of {repeat}", ""]
    if case.burst_size:
        lines.append(
            f"{'contender':<22}{'handler':<10}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}{'peak':>6}"
        )
        for r in rows:
            lines.append(
                f"{r['contender']:<22}{HANDLER_LABELS[r['handler']]:<10}"
                f"{r['p50_ms']:>8.1f}{r['p99_ms']:>8.1f}{r['max_ms']:>8.1f}"
                f"{r['peak']:>6}"
            )
        return lines
    lines.append(
        f"{'contender':<22}{'handler':<10}{'jobs/s':>9}{'efficiency':>12}{'peak':>6}"
        f"{'busy':>6}{'mean ms':>9}"
    )
    for r in rows:
        timed = r["efficiency"] is not None  # trivial jobs: nothing to say
        efficiency = f"{r['efficiency']:.2f}" if timed else "-"
        busy, mean = (f"{r['busy']:.2f}", f"{r['mean_ms']:.2f}") if timed else ("-", "-")
        lines.append(
            f"{r['contender']:<22}{HANDLER_LABELS[r['handler']]:<10}"
            f"{r['jobs_per_s']:>9,.0f}{efficiency:>12}{r['peak']:>6}{busy:>6}{mean:>9}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--dsn",
        default=os.environ.get("PGQUEUE_DSN"),
        help="default: $PGQUEUE_DSN, else an embedded server",
    )
    p.add_argument(
        "--cases",
        default=",".join(make_cases()),
        help="comma-separated (default: all): " + ", ".join(make_cases()),
    )
    p.add_argument(
        "--backends",
        default="sync,asyncio,trio",
        help="pgqueue backends, comma-separated (default: sync,asyncio,trio)",
    )
    p.add_argument(
        "--processes",
        default="1,2",
        help="the CPU case's `pgqueue worker --processes` values (default 1,2)",
    )
    p.add_argument("--repeat", type=int, default=3, help="rounds; the median counts (default 3)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: to see that it works")
    p.add_argument("--no-peers", action="store_true", help="leave pgqueuer and procrastinate out")
    p.add_argument(
        "--peers-venv",
        type=Path,
        default=HERE.parent / ".venv-peers",
        help="the peers' venv, made on first use (default: .venv-peers)",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    every = make_cases(smoke=args.smoke)
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    args.processes = [int(n) for n in args.processes.split(",") if n.strip()]
    if unknown := [n for n in names if n not in every]:
        p.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(every)}")
    if unknown := [b for b in args.backends if b not in BACKEND_HANDLERS]:
        p.error(f"unknown backend(s) {', '.join(unknown)}")
    if args.repeat < 1 or not names or any(n < 1 for n in args.processes):
        p.error("--repeat and --processes must be at least 1, and --cases not empty")

    def note(message: str) -> None:
        if not args.json:
            print(message, file=sys.stderr)

    skipped: dict[str, str] = {}
    skipped.update(missing_backends(args.backends))  # trio, when it is not installed
    args.backends = [b for b in args.backends if b not in skipped]
    if "cpu" in names and (why := processes_missing()):
        skipped["cpu"] = why
        names.remove("cpu")
    peers: Path | None = None
    if not args.no_peers and any(n in PEER_CASES for n in names):
        try:
            peers = peers_python(args.peers_venv)
        except (OSError, subprocess.CalledProcessError) as exc:
            skipped["peers"] = f"their venv could not be made: {exc}"
    for what, why in skipped.items():
        print(f"{what}: skipped, {why}", file=sys.stderr)
    cases = [every[n] for n in names]
    loops = calibrate_cpu_loops(every["cpu"].durations[0]) if "cpu" in names else 0

    with dsn_or_embedded(args.dsn) as dsn:
        plan = [(case, contenders(args, dsn, case, peers, loops)) for case in cases]
        for repeat in range(args.repeat):
            for case, group in plan:
                for contender in group:
                    note(
                        f"run {repeat + 1}/{args.repeat}: {case.name}, "
                        f"{contender.name} ({HANDLER_LABELS[contender.handler]})..."
                    )
                    contender.runs.append(contender.run(case))
    results = {case.name: [summary(case, c) for c in group] for case, group in plan}

    if args.json:
        report = {
            "repeat": args.repeat,
            "smoke": args.smoke,
            "server": "--dsn / PGQUEUE_DSN" if args.dsn else "embedded PostgreSQL",
            "cpu_loops": loops,
            "skipped": skipped,
            "cases": {
                case.name: {
                    "title": case.title,
                    "ideal_jobs_per_s": case.ideal,
                    "results": results[case.name],
                }
                for case, _ in plan
            },
        }
        print(json.dumps(report, indent=2))
        leave_stuck_threads_behind()
        return 0
    for case, _ in plan:
        print("\n".join(case_table(case, results[case.name], args.repeat)))
        if case.cpu_bound:
            first, *others = results[case.name]
            for r in others:
                ratio = r["jobs_per_s"] / first["jobs_per_s"]
                print(f"{r['contender']}: {ratio:.2f}x the jobs/s of {first['contender']}")
        print()
    print(
        "peak: the most handlers running at once (every start and end counted); "
        "time: first handler start to last handler end; busy: the share of the slots' "
        "time that handlers ran; mean ms: what a handler really took"
    )
    leave_stuck_threads_behind()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
