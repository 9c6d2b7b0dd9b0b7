"""How long a failed job waits before its next attempt."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import timedelta

__all__ = ["Backoff"]


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff by attempts, with jitter, capped; returns a `timedelta`.

    The delay after the n-th attempt is ``base * factor ** n`` (by default
    ``2 ** n`` seconds, as the seed design), stretched by a random fraction
    of up to ``jitter`` of itself so that jobs which failed together do not
    retry together, and never longer than ``cap``.

    >>> Backoff(jitter=0).delay(3)
    datetime.timedelta(seconds=8)
    >>> Backoff(jitter=0, cap=timedelta(seconds=5)).delay(3)
    datetime.timedelta(seconds=5)
    """

    base: timedelta = timedelta(seconds=1)
    factor: float = 2.0
    cap: timedelta = timedelta(hours=1)
    jitter: float = 0.1
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.base, timedelta) or self.base < timedelta(0):
            raise ValueError("Backoff.base must be a non-negative timedelta")
        if not isinstance(self.cap, timedelta) or self.cap < timedelta(0):
            raise ValueError("Backoff.cap must be a non-negative timedelta")
        if not (self.factor >= 1 and math.isfinite(self.factor)):
            raise ValueError("Backoff.factor must be a finite number, at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("Backoff.jitter must be between 0 and 1")

    def bounds(self, attempts: int) -> tuple[timedelta, timedelta]:
        """The smallest and largest delay `delay(attempts)` can return."""
        base = self.base.total_seconds()
        try:
            raw = base * self.factor ** max(attempts, 0) if base else 0.0
        except OverflowError:
            raw = math.inf
        return self._capped(raw), self._capped(raw * (1 + self.jitter))

    def _capped(self, seconds: float) -> timedelta:
        # Compare in seconds, return the cap itself: no float round trip past it.
        return self.cap if seconds >= self.cap.total_seconds() else timedelta(seconds=seconds)

    def delay(self, attempts: int) -> timedelta:
        """The wait after a job's `attempts`-th failed attempt."""
        low, high = self.bounds(attempts)
        return low + (high - low) * self.rng.random()
