"""``--processes N``: one supervisor, N worker processes, each with its own pool.

For CPU-bound handlers, which a single process runs on one core at a time
(the GIL). The children are started with the ``spawn`` method: a fresh
interpreter that multiprocessing gives the parent's ``sys.path``, working
directory and main module, so that ``pgqueue worker``, ``manage.py
pgqueue_worker`` and ``flask pgqueue worker`` all rebuild their worker the
same way, from a picklable `WorkerFactory`, without guessing a command line,
and nothing of the parent's pools, threads or event loops is inherited.

What each side owns:

* a child builds its worker, runs it, counts the jobs it finished in a
  shared integer (only it writes it) and stops gracefully after
  ``max_jobs`` of them; it takes its orders as signals, from the supervisor
  only (it leaves the terminal's process group, so that a Ctrl-C reaches it
  once, through the supervisor), and stops if the supervisor vanishes;
* the supervisor starts the children, restarts one that dies (at once for
  one that retired after its jobs, else after `RETRY_BACKOFF`, the delay
  every loop of a worker retries with), forwards SIGINT and SIGTERM (the
  first stops every child gracefully, the second interrupts their jobs) and
  serves their metrics together on ``--metrics-port``, and their health on
  ``--health-port`` (each child stamps its own in shared memory: live
  while every child's loop turns, ready while every child runs and
  reaches the database).
"""

from __future__ import annotations

import enum
import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from ctypes import c_double, c_longlong
from dataclasses import dataclass, field
from multiprocessing.context import SpawnContext, SpawnProcess
from types import FrameType
from typing import Any

from ..core.events import EventName, JobEvent
from ..core.health import HealthReport, assess
from ..core.worker import RETRY_BACKOFF
from ..sync.queue import Queue
from ..sync.worker import Worker
from .errors import UsageError
from .probes import HttpOptions
from .worker import STOP_SIGNALS, WorkerFactory, leave_stuck_calls_behind, serve, serve_http

NO_HTTP = HttpOptions()

__all__ = ["ChildExit", "Supervisor", "WorkerFactory", "supervise"]

log = logging.getLogger("pgqueue.cli")

MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"

CHILD_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"

# The events that end a job's run in this worker: what --max-jobs-per-child counts.
FINISHED = frozenset({EventName.SUCCEEDED, EventName.FAILED, EventName.DEAD, EventName.CANCELLED})


class ChildExit(enum.IntEnum):
    """How a worker process ended, as its exit status tells the supervisor."""

    DONE = 0
    """Stopped: by the supervisor, or with ``--until-empty`` once nothing was ready."""
    FAILED = 1
    """The worker failed: restarted after a backoff."""
    UNUSABLE = 2
    """The worker could not be built or set up: every child would fail alike."""
    RETIRED = 3
    """Stopped after its ``max_jobs``: replaced at once."""


@dataclass(frozen=True)
class ChildSpec:
    """What a worker process is told: everything but its job counter is pickled for it."""

    build: WorkerFactory
    trio: bool
    until_empty: bool
    max_jobs: int | None
    metrics: bool
    log_level: str
    migrate: str = "pgqueue migrate"


def supervise(
    build: WorkerFactory,
    *,
    processes: int,
    max_jobs_per_child: int | None = None,
    trio: bool = False,
    until_empty: bool = False,
    http: HttpOptions = NO_HTTP,
    log_level: str = "INFO",
    migrate: str = "pgqueue migrate",
) -> int:
    """Run ``processes`` workers built by ``build`` under one supervisor; its exit status.

    ``migrate`` is the command a worker started before the schema is
    installed names (``flask pgqueue migrate``...).

    ``build`` is called here first, so that a target that cannot be loaded
    is reported before any process starts (and for the queue whose stats
    ``--metrics-port`` serves), then once in each child.
    """
    worker = build()
    if trio and isinstance(worker, Worker):
        raise UsageError("--trio runs an AsyncWorker; a pgqueue.Worker runs on threads")
    metrics = http.metrics_port is not None
    spec = ChildSpec(build, trio, until_empty, max_jobs_per_child, metrics, log_level, migrate)
    supervisor = Supervisor(spec, processes)
    try:
        with children_metrics_dir() if metrics else nullcontext("") as path:
            close = serve_http(worker, http, supervisor.health, children_dir=path or None)
            try:
                return supervisor.run()
            finally:
                close()
    finally:
        # The worker built here only for its settings and its queue's stats.
        if isinstance(worker.queue, Queue):
            worker.queue.close()


@contextmanager
def children_metrics_dir() -> Iterator[str]:
    """A new directory where the children write their metrics, named in the
    environment they inherit (prometheus_client's multiprocess mode); removed after."""
    previous = os.environ.get(MULTIPROC_DIR)
    path = tempfile.mkdtemp(prefix="pgqueue-metrics-")
    os.environ[MULTIPROC_DIR] = path
    try:
        yield path
    finally:
        if previous is None:
            del os.environ[MULTIPROC_DIR]
        else:
            os.environ[MULTIPROC_DIR] = previous
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class Slot:
    """One of the N places a worker process runs in; written by the supervisor only."""

    number: int
    process: SpawnProcess | None = None
    jobs: c_longlong | None = None  # written by the child, read after it ends
    crashes: int = 0  # deaths in a row without a finished job
    start_at: float | None = None  # monotonic time of the next start; None: none due
    health: SharedStamps | None = None  # written by its child, read by the health probes


@dataclass
class Supervisor:
    """Starts the children, restarts those that die, forwards the stop signals."""

    spec: ChildSpec
    processes: int
    ctx: SpawnContext = field(default_factory=lambda: multiprocessing.get_context("spawn"))

    def __post_init__(self) -> None:
        self.slots = [Slot(n) for n in range(1, self.processes + 1)]
        # Written by the signal handler, read by the loop.
        self._signals = 0
        self._forwarded = 0
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._status = 0

    def run(self) -> int:
        """Supervise until every child has ended; the command's exit status."""
        # Only the main thread may set signal handlers; elsewhere the program owns them.
        main = threading.current_thread() is threading.main_thread()
        previous = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS if main}
        log.info("supervising %d worker processes (spawn)", self.processes)
        try:
            for slot in self.slots:
                self._start(slot)
            while self._loop_once():
                pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(self._wake_r)
            os.close(self._wake_w)
        log.info("every worker process has stopped")
        return self._status

    def health(self) -> HealthReport:
        """(Any thread.) Every child's health: a slot between two children is
        not ready, and live (it is restarted)."""
        return assess([s.health if s.process is not None else None for s in self.slots])

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        with suppress(BlockingIOError):  # woken already
            os.write(self._wake_w, b"\0")

    def _loop_once(self) -> bool:
        now = time.monotonic()
        alive = [s for s in self.slots if s.process is not None]
        due = [s.start_at for s in self.slots if s.start_at is not None]
        if not alive and not due:
            return False
        timeout = max(0.0, min(due) - now) if due else None
        waited: list[Any] = [s.process.sentinel for s in alive if s.process is not None]
        ready = multiprocessing.connection.wait([*waited, self._wake_r], timeout)
        if self._wake_r in ready:
            os.read(self._wake_r, 64)
        self._forward_signals()
        for slot in alive:
            if slot.process is not None and not slot.process.is_alive():
                self._reap(slot)
        for slot in self.slots:
            if slot.start_at is not None and slot.start_at <= time.monotonic():
                self._start(slot)
        return True

    def _forward_signals(self) -> None:
        while self._forwarded < self._signals:
            self._forwarded += 1
            if self._forwarded == 1:
                log.info("stopping every worker process gracefully")
            else:
                log.warning("stop signal again: interrupting the worker processes' jobs")
            self._stop_all()

    def _stop_all(self) -> None:
        for slot in self.slots:
            slot.start_at = None
            process = slot.process
            if process is not None and process.pid is not None and process.is_alive():
                with suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)

    def _start(self, slot: Slot) -> None:
        slot.start_at = None
        slot.jobs = self.ctx.Value("q", 0, lock=False)
        slot.health = SharedStamps(self.ctx.Value("d", 0.0, lock=False),
                                   self.ctx.Value("d", 0.0, lock=False))  # fmt: skip
        slot.process = self.ctx.Process(
            target=child_main,
            args=(self.spec, slot.jobs, slot.health),
            name=f"pgqueue-worker-{slot.number}",
        )
        slot.process.start()
        log.info("worker process %d started (pid %s)", slot.number, slot.process.pid)

    def _reap(self, slot: Slot) -> None:
        process, jobs = slot.process, slot.jobs
        assert process is not None and jobs is not None
        process.join()
        slot.process = slot.jobs = None
        code, finished = process.exitcode, jobs.value
        forget_metrics_of(process.pid)
        how = describe_exit(code)
        if self._forwarded:
            log.info("worker process %d (pid %s) %s", slot.number, process.pid, how)
        elif code == ChildExit.RETIRED:
            log.info("worker process %d (pid %s) retired after %d jobs; replacing it",
                     slot.number, process.pid, finished)  # fmt: skip
            slot.crashes = 0
            slot.start_at = time.monotonic()
        elif code == ChildExit.DONE:
            log.info("worker process %d (pid %s) is done", slot.number, process.pid)
        elif code == ChildExit.UNUSABLE:
            log.error("worker process %d (pid %s) could not set up its worker; stopping",
                      slot.number, process.pid)  # fmt: skip
            self._status = ChildExit.UNUSABLE
            self._signals += 1  # as if told to stop
            self._forward_signals()
        else:
            slot.crashes = slot.crashes + 1 if finished == 0 else 1
            delay = RETRY_BACKOFF.delay(slot.crashes).total_seconds()
            log.warning("worker process %d (pid %s) %s after %d jobs; restarting it in %.1f s",
                        slot.number, process.pid, how, finished, delay)  # fmt: skip
            slot.start_at = time.monotonic() + delay


def describe_exit(code: int | None) -> str:
    """A child's exit status in words."""
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def forget_metrics_of(pid: int | None) -> None:
    """Drop the live gauges of a dead child, in multiprocess mode (its counters stay)."""
    if pid is None or not os.environ.get(MULTIPROC_DIR):
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


# -- in the child ------------------------------------------------------------------


class _SharedTime:
    """A time (`time.monotonic`) that a child writes and its supervisor reads:
    an attribute of `SharedStamps` kept in the ``c_double`` of the same name
    with a leading underscore."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, stamps: object, owner: type | None = None) -> float:
        return float(getattr(stamps, self.slot).value)

    def __set__(self, stamps: object, value: float) -> None:
        getattr(stamps, self.slot).value = value


class SharedStamps:
    """A child's `pgqueue.core.health.HealthStamps`, in memory its supervisor reads."""

    turned_at = _SharedTime()
    reached_at = _SharedTime()

    def __init__(self, turned: c_double, reached: c_double) -> None:
        self.started_at = time.monotonic()
        self._turned_at = turned
        self._reached_at = reached


def child_main(spec: ChildSpec, jobs: c_longlong, health: SharedStamps) -> None:
    """A worker process: build the worker, run it, exit with a `ChildExit` status."""
    # Out of the terminal's process group: a Ctrl-C reaches this process once,
    # forwarded by the supervisor, not twice (which would interrupt its jobs).
    os.setpgid(0, 0)
    logging.basicConfig(level=spec.log_level, format=CHILD_LOG_FORMAT, stream=sys.stderr)
    try:
        worker = spec.build()
        if spec.metrics:
            from ..prometheus import PrometheusMetrics

            worker.add_event_listener(PrometheusMetrics())
    except Exception as exc:  # a UsageError, a framework's error, a metric registered twice
        log.error("cannot set up the worker: %s: %s", type(exc).__name__, exc)
        sys.exit(ChildExit.UNUSABLE)
    worker.health = health
    counter = JobCounter(jobs, spec.max_jobs, worker.stop)
    worker.add_event_listener(counter)
    watch_parent(worker.stop)
    status = serve(worker, trio=spec.trio, until_empty=spec.until_empty, migrate=spec.migrate)
    if status == ChildExit.DONE and counter.retired:
        status = ChildExit.RETIRED
    if status in (ChildExit.DONE, ChildExit.RETIRED):
        leave_stuck_calls_behind(status)
    sys.exit(status)


@dataclass
class JobCounter:
    """An event listener: counts the jobs this worker finished, and stops it after ``limit``."""

    jobs: c_longlong
    limit: int | None
    stop: Callable[[], None]
    retired: bool = False  # written on the worker's event loop thread, read after the run

    def __call__(self, event: JobEvent) -> None:
        # A reaper's events (kind None) are about other workers' jobs.
        if event.name not in FINISHED or event.kind is None:
            return
        self.jobs.value += 1
        if self.limit is not None and self.jobs.value >= self.limit and not self.retired:
            log.info("finished %d jobs: stopping, to be replaced", self.jobs.value)
            self.retired = True
            self.stop()


def watch_parent(stop: Callable[[], None]) -> None:
    """Stop gracefully if the supervisor dies (killed, say): no orphan keeps working."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def wait() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        log.warning("the supervisor is gone: stopping")
        stop()

    threading.Thread(target=wait, name="pgqueue-parent-watch", daemon=True).start()
