"""What ``workload.py`` and its peers' runner share: the cases, the
handlers' bookkeeping, the burst producer and the summary of one run.

Standard library only: the peers' runner imports it in a venv of its own,
where pgqueue is not installed.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

KIND = "work"  # the one kind (task, entrypoint) every case enqueues
LIMIT_KEY = "workload"
WARMUP = -1  # the job number of the burst case's warm-up job (not measured)
START_TIMEOUT = 30.0  # seconds the warm-up job may take to start


@dataclass(frozen=True)
class Case:
    """One workload: the handler time of each job, in enqueue order."""

    name: str
    title: str
    concurrency: int
    durations: tuple[float, ...]
    limit: int | None = None  # set_limit(LIMIT_KEY, limit) and every job has the key
    burst_size: int = 0  # >0: jobs come in bursts of this many ...
    burst_every: float = 0.0  # ... every this many seconds, while the worker runs
    cpu_bound: bool = False  # the handler computes: one process runs one at a time

    def duration(self, n: int) -> float:
        """Job ``n``'s handler time (the warm-up job's: none)."""
        return 0.0 if n == WARMUP else self.durations[n]

    @property
    def jobs(self) -> int:
        return len(self.durations)

    @property
    def slots(self) -> int:
        """How many handlers may run at once (per process)."""
        return 1 if self.cpu_bound else min(self.concurrency, self.limit or self.concurrency)

    @property
    def ideal(self) -> float | None:
        """Jobs/s if every runner (or limit slot; CPU-bound: each process)
        were busy all the time; None where it has no meaning (bursts: the
        arrival rate; trivial jobs)."""
        if self.burst_size or not any(self.durations):
            return None
        return self.slots / statistics.fmean(self.durations)


def mixed_durations(jobs: int, short: float, long: float, long_share: float) -> tuple[float, ...]:
    """``jobs`` durations, ``long_share`` of them ``long``, in a fixed shuffled order."""
    longs = round(jobs * long_share)
    durations = [long] * longs + [short] * (jobs - longs)
    random.Random(24).shuffle(durations)  # the same order in every run and contender
    return tuple(durations)


def make_cases(*, smoke: bool = False) -> dict[str, Case]:
    """Every case by name (``smoke``: tiny sizes, only to see the script work)."""
    uniform = (20, 0.005) if smoke else (1000, 0.02)
    bursts = (2, 2, 0.02, 0.05) if smoke else (30, 4, 0.1, 0.2)
    mixed, long = (20, 0.1) if smoke else (600, 1.0)
    limit = (20, 2) if smoke else (500, 10)
    trivial = 20 if smoke else 2000
    cpu = 20 if smoke else 1000
    n_bursts, size, job_s, every = bursts
    cases = [
        Case(
            "uniform",
            f"uniform I/O: {uniform[0]:,} jobs of {uniform[1] * 1000:g} ms, concurrency "
            f"{2 if smoke else 16}",
            2 if smoke else 16,
            (uniform[1],) * uniform[0],
        ),
        Case(
            "burst",
            f"bursts: {n_bursts} bursts of {size} jobs of {job_s * 1000:g} ms every "
            f"{every * 1000:g} ms, concurrency {size}",
            size,
            (job_s,) * (n_bursts * size),
            burst_size=size,
            burst_every=every,
        ),
        Case(
            "mixed",
            f"mixed: {mixed:,} jobs, 95 % of 5 ms and 5 % of {long:g} s, concurrency "
            f"{4 if smoke else 8}",
            4 if smoke else 8,
            mixed_durations(mixed, 0.005, long, 0.05),
        ),
        Case(
            "limit",
            f"limit: {limit[0]:,} jobs of 10 ms, one key limited to {limit[1]}, concurrency 16",
            16,
            (0.01,) * limit[0],
            limit=limit[1],
        ),
        Case(
            "limit-trivial",
            f"limit, trivial jobs: {trivial:,} jobs, one key limited to {limit[1]}, concurrency 16",
            16,
            (0.0,) * trivial,
            limit=limit[1],
        ),
        Case(
            "cpu",
            f"CPU-bound: {cpu:,} jobs of 2 ms of pure-Python work, `pgqueue worker --processes N`",
            4,
            (0.002,) * cpu,
            cpu_bound=True,
        ),
    ]
    return {case.name: case for case in cases}


def cpu_work(loops: int) -> int:
    """Pure-Python work that holds the GIL throughout."""
    total = 0
    for i in range(loops):
        total += i * i % 7
    return total


def calibrate_cpu_loops(seconds: float) -> int:
    """How many `cpu_work` loops take ``seconds`` here (the median of five tries)."""
    probe = 20_000
    times = []
    for _ in range(5):
        start = time.perf_counter()
        cpu_work(probe)
        times.append(time.perf_counter() - start)
    return max(1, round(probe * seconds / statistics.median(times)))


class Tracker:
    """Every handler's start and end, from any thread, and what was enqueued when.

    ``on_done`` is called (in the handler's thread) when the ``expected``-th
    measured job has ended: it stops the worker.
    """

    def __init__(self, expected: int, on_done: Callable[[], object] = lambda: None) -> None:
        self.expected, self.on_done = expected, on_done
        self._lock = threading.Lock()
        self.running = self.peak = self.done = 0
        self.first_start: float | None = None
        self.last_end = 0.0
        self.busy = 0.0  # handler seconds, summed over the jobs
        self.started: dict[int, float] = {}
        self.committed: dict[int, float] = {}
        self.warm = threading.Event()

    def start(self, n: int) -> None:
        now = time.perf_counter()
        if n == WARMUP:
            self.warm.set()
            return
        with self._lock:
            self.started[n] = now
            if self.first_start is None:
                self.first_start = now
            self.running += 1
            self.peak = max(self.peak, self.running)

    def end(self, n: int) -> None:
        if n == WARMUP:
            return
        with self._lock:
            self.running -= 1
            self.done += 1
            self.last_end = time.perf_counter()
            self.busy += self.last_end - self.started[n]
            finished = self.done == self.expected
        if finished:
            self.on_done()

    def result(self) -> dict[str, Any]:
        """One run: jobs, seconds from the first start to the last end, the
        peak of handlers running at once, and each job's commit-to-start
        latency in ms (jobs enqueued while the worker ran)."""
        if self.done != self.expected or self.first_start is None:
            raise RuntimeError(f"{self.done} of {self.expected} jobs ran")
        latencies = [(self.started[n] - t) * 1000 for n, t in sorted(self.committed.items())]
        return {
            "jobs": self.done,
            "seconds": self.last_end - self.first_start,
            "peak": self.peak,
            "busy_seconds": self.busy,
            "latencies_ms": latencies,
        }


def produce_bursts(case: Case, enqueue: Callable[[list[int]], object], tracker: Tracker) -> None:
    """(In a thread of its own.) A warm-up job, once it has started the
    bursts, each on time; ``enqueue`` commits the jobs numbered."""
    enqueue([WARMUP])
    if not tracker.warm.wait(START_TIMEOUT):
        raise RuntimeError(f"the warm-up job did not start within {START_TIMEOUT:g} s")
    first = time.perf_counter() + case.burst_every
    for burst in range(case.jobs // case.burst_size):
        pause = first + burst * case.burst_every - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        numbers = list(range(burst * case.burst_size, (burst + 1) * case.burst_size))
        enqueue(numbers)
        committed = time.perf_counter()
        tracker.committed.update(dict.fromkeys(numbers, committed))


def percentile(values: list[float], pct: float) -> float:
    """The nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]
