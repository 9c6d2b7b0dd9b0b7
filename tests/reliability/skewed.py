"""Run pgqueue in a process whose wall clock is off by a given number of seconds.

    python -m tests.reliability.skewed SECONDS worker TARGET [OPTIONS]   # pgqueue worker ...
    python -m tests.reliability.skewed SECONDS enqueue COUNT DELAY       # COUNT jobs, DELAY s

Before anything else is imported, ``time.time``, ``time.time_ns`` and
``datetime.datetime`` (``now``, ``utcnow``, ``today``) are replaced with
versions that add SECONDS: every wall-clock reading in the process, pgqueue's
and its libraries', is skewed. Monotonic clocks are left alone, as a
wrong wall clock leaves them alone. (A C-level fake such as libfaketime
would also skew the server's libpq, which needs no clock; this needs no
package.)

``enqueue`` adds COUNT ``count`` jobs due at once and COUNT due in DELAY
seconds, each way: ``enqueue`` one by one and ``enqueue_many``.
"""

from __future__ import annotations

import datetime as _datetime
import sys
import time as _time
from typing import Any

SKEW = float(sys.argv[1])
_real_time = _time.time
_real_time_ns = _time.time_ns


def _time_skewed() -> float:
    return _real_time() + SKEW


def _time_ns_skewed() -> int:
    return _real_time_ns() + int(SKEW * 1e9)


class _SkewedDatetime(_datetime.datetime):
    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return super().now(tz) + _datetime.timedelta(seconds=SKEW)

    @classmethod
    def utcnow(cls) -> Any:
        return super().now(_datetime.UTC).replace(tzinfo=None) + _datetime.timedelta(seconds=SKEW)

    @classmethod
    def today(cls) -> Any:
        return cls.now()


_time.time = _time_skewed
_time.time_ns = _time_ns_skewed
_datetime.datetime = _SkewedDatetime  # type: ignore[misc]


def enqueue(count: int, delay: float) -> None:
    import os
    from datetime import timedelta

    import pgqueue

    later = timedelta(seconds=delay)
    with pgqueue.Queue(os.environ["PGQUEUE_DSN"], table=os.environ["PGQUEUE_TABLE"]) as q:
        for i in range(count):
            q.enqueue("count", {"due": "now", "i": i})
            q.enqueue("count", {"due": "later", "i": i}, delay=later)
        q.enqueue_many([pgqueue.JobSpec("count", {"due": "now", "i": i}) for i in range(count)])
        q.enqueue_many(
            [pgqueue.JobSpec("count", {"due": "later", "i": i}, delay=later) for i in range(count)]
        )


def main() -> int:
    command, args = sys.argv[2], sys.argv[3:]
    if command == "enqueue":
        enqueue(int(args[0]), float(args[1]))
        return 0
    from pgqueue import cli

    return cli.main([command, *args])


if __name__ == "__main__":
    sys.exit(main())
