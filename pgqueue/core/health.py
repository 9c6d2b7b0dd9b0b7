"""A worker's health, as a probe asks for it: is its loop turning, did it reach the database?

The worker stamps two times as it runs (`HealthStamps`): ``turned_at``,
every `TURN_EVERY` seconds from a task of its event loop, and
``reached_at``, whenever a database call of its returns. A worker whose
calls have all been quiet for `PING_AFTER` seconds (a batch of long jobs
claimed, say) makes a cheap read to learn whether it still could.
`assess` turns the stamps into a `HealthReport`, with no I/O, for
``pgqueue worker --health-port`` (and under ``--processes``, over every
worker process's stamps, which live in shared memory there).

Times are `time.monotonic` seconds: one clock for every thread and, on
Linux and macOS, for every process of the machine.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "LIVE_WITHIN",
    "PING_AFTER",
    "READY_WITHIN",
    "TURN_EVERY",
    "HealthReport",
    "HealthStamps",
    "Stamps",
    "assess",
]

TURN_EVERY = 1.0
"""Seconds between the stamps of a worker's event loop."""
LIVE_WITHIN = 30.0
"""A worker is live while its loop stamped within this many seconds (or, not
started yet, while it was made within this many: importing, connecting)."""
READY_WITHIN = 30.0
"""A worker is ready while one of its database calls returned within this many seconds."""
PING_AFTER = 10.0
"""After this many seconds with no call returned, the worker reads the schema version."""


class HealthStamps(Protocol):
    """What `assess` reads; written by one worker's run, read from any thread."""

    started_at: float  # when the worker (or its process) was made
    turned_at: float  # its event loop's last stamp; 0.0: never
    reached_at: float  # its last database call that returned; 0.0: never


class Stamps:
    """A worker's stamps in its own memory (`pgqueue.AsyncWorker.health`).

    Owner: the worker's run writes ``turned_at`` and ``reached_at`` on its
    event loop; probes read them from other threads (floats, one writer).
    """

    def __init__(self) -> None:
        self.started_at = time.monotonic()
        self.turned_at = 0.0
        self.reached_at = 0.0

    def turned(self) -> None:
        self.turned_at = time.monotonic()

    def reached(self) -> None:
        self.reached_at = time.monotonic()


@dataclass(frozen=True)
class HealthReport:
    """What a probe answers: live and ready, each with the reason when not."""

    live: bool
    ready: bool
    why_not_live: str = ""
    why_not_ready: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "live": self.live,
            "ready": self.ready,
            "why_not_live": self.why_not_live or None,
            "why_not_ready": self.why_not_ready or None,
        }


def assess(workers: Sequence[HealthStamps | None], now: float | None = None) -> HealthReport:
    """Whether every worker is live and ready; ``None`` for one not running
    now (a worker process between a death and its restart): not ready, and
    live (its supervisor restarts it)."""
    if now is None:
        now = time.monotonic()
    not_live: list[str] = []
    not_ready: list[str] = []
    for number, stamps in enumerate(workers, 1):
        who = f"worker {number}: " if len(workers) > 1 else ""
        if stamps is None:
            not_ready.append(f"{who}not running (being restarted)")
            continue
        if stamps.turned_at:
            if now - stamps.turned_at > LIVE_WITHIN:
                not_live.append(
                    f"{who}its event loop has not turned for {now - stamps.turned_at:.0f}s "
                    "(blocked by a handler, or the worker stopped)"
                )
        elif now - stamps.started_at > LIVE_WITHIN:
            not_live.append(f"{who}not running {now - stamps.started_at:.0f}s after it was made")
        if not stamps.reached_at:
            not_ready.append(f"{who}has not reached the database yet")
        elif now - stamps.reached_at > READY_WITHIN:
            not_ready.append(
                f"{who}has not reached the database for {now - stamps.reached_at:.0f}s"
            )
    return HealthReport(
        live=not not_live,
        ready=not not_ready and not not_live,
        why_not_live="; ".join(not_live),
        why_not_ready="; ".join(not_ready or not_live),
    )
