"""Testing helpers: assert what code enqueued, run the jobs, run one handler.

    from pgqueue.testing import assert_enqueued, drain

    def test_checkout_sends_a_receipt(queue):
        checkout(queue, order_id=42)
        assert_enqueued(queue, "send_receipt", payload={"order_id": 42})
        drained = drain(queue)                 # runs it, and what it enqueues
        assert drained.dead == []

For an `AsyncQueue`, the same names with an ``a`` in front, awaited
(`aenqueued`, `aassert_enqueued`, `aassert_not_enqueued`, `adrain`,
`arun_job`). `run_job` runs one handler or task on a `build_job` job, with
its `pgqueue.job_context()`, and no database. The pytest fixtures
(``pgqueue_dsn``, ``pgqueue_queue``, ``pgqueue_async_queue``) come with the
plugin `pgqueue.testing.plugin`, which pytest loads by itself once pgqueue
is installed. See docs/testing.md.
"""

from __future__ import annotations

from ..aio.testing import aassert_enqueued, aassert_not_enqueued, adrain, aenqueued, arun_job
from ..core.draining import Drained, build_job, task_job
from ..sync.testing import assert_enqueued, assert_not_enqueued, drain, enqueued, run_job

__all__ = [
    "Drained",
    "aassert_enqueued",
    "aassert_not_enqueued",
    "adrain",
    "aenqueued",
    "arun_job",
    "assert_enqueued",
    "assert_not_enqueued",
    "build_job",
    "drain",
    "enqueued",
    "run_job",
    "task_job",
]
