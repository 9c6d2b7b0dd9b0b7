"""SPEC §3: every bad input raises a clear exception and writes nothing."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import pgqueue
from pgqueue import JobSpec
from pgqueue.core.ops import QueueCore
from pgqueue.core.plans import Copy, Query

from ..backends import open_queue
from ..conftest import Raw

pytestmark = pytest.mark.anyio

NOW = datetime.now(UTC)

BAD_ENQUEUES: list[tuple[str, tuple[Any, ...], dict[str, Any], type[Exception], str]] = [
    ("unserialisable payload", ("k", object()), {}, TypeError, "JSON"),
    ("set payload", ("k", {1, 2}), {}, TypeError, "JSON"),
    ("NaN payload", ("k", {"x": float("nan")}), {}, TypeError, "JSON"),
    ("NUL in payload", ("k", {"x": "a\x00b"}), {}, ValueError, "NUL"),
    ("NUL after a backslash", ("k", {"x": "\\\x00"}), {}, ValueError, "NUL"),
    ("NUL in a key", ("k", {"a\x00": 1}), {}, ValueError, "NUL"),
    ("lone surrogate in payload", ("k", ["\ud800"]), {}, ValueError, "surrogate"),
    ("lone surrogate in kind", ("k\udfff",), {}, ValueError, "surrogate"),
    ("empty kind", ("",), {}, ValueError, "empty"),
    ("blank kind", ("   ",), {}, ValueError, "empty"),
    ("non-string kind", (42,), {}, TypeError, "str"),
    ("None kind", (None,), {}, TypeError, "str"),
    ("NUL in kind", ("a\x00",), {}, ValueError, "NUL"),
    ("huge kind", ("k" * 256,), {}, ValueError, "longer"),
    ("zero max_attempts", ("k",), {"max_attempts": 0}, ValueError, "max_attempts"),
    ("negative max_attempts", ("k",), {"max_attempts": -1}, ValueError, "max_attempts"),
    ("float max_attempts", ("k",), {"max_attempts": 2.5}, TypeError, "max_attempts"),
    ("negative delay", ("k",), {"delay": timedelta(seconds=-1)}, ValueError, "negative"),
    ("delay past year 9999", ("k",), {"delay": timedelta.max}, ValueError, "at most"),
    ("delay as a string", ("k",), {"delay": "2 seconds"}, TypeError, "timedelta"),
    ("run_at and delay", ("k",), {"run_at": NOW, "delay": timedelta(1)}, ValueError, "not both"),
    ("naive run_at", ("k",), {"run_at": datetime(2030, 1, 1)}, ValueError, "timezone"),
    ("priority above 100", ("k",), {"priority": 101}, ValueError, "priority"),
    ("priority below -100", ("k",), {"priority": -101}, ValueError, "priority"),
    ("float priority", ("k",), {"priority": 1.5}, TypeError, "priority"),
    ("empty queue name", ("k",), {"queue": ""}, ValueError, "queue name"),
    ("non-string queue name", ("k",), {"queue": 5}, TypeError, "queue name"),
]


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "words"),
    [case[1:] for case in BAD_ENQUEUES],
    ids=[case[0] for case in BAD_ENQUEUES],
)
async def test_bad_enqueue_raises_and_writes_nothing(
    queue: Any,
    raw: Raw,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    error: type[Exception],
    words: str,
) -> None:
    with pytest.raises(error, match=words):
        await queue.enqueue(*args, **kwargs)
    assert raw.count() == 0


async def test_text_that_only_looks_like_an_escape_is_stored_as_given(queue: Any) -> None:
    # An escaped backslash, then "u0000": no NUL; astral characters are not surrogates.
    payload = {"path": "C:\\u0000", "emoji": "\U0001f600", "keys": {"\\u0000": 1}}
    job = await queue.get(await queue.enqueue("k", payload))
    assert job.payload == payload


@pytest.mark.parametrize("size", [3, 500], ids=["insert", "copy"])
async def test_one_bad_spec_in_a_batch_writes_nothing(queue: Any, raw: Raw, size: int) -> None:
    specs: list[Any] = [("ok", i) for i in range(size)]
    specs.insert(size // 2, JobSpec("bad", max_attempts=0))
    with pytest.raises(ValueError, match="max_attempts"):
        await queue.enqueue_many(specs)
    specs[size // 2] = "not a spec"
    with pytest.raises(TypeError, match="JobSpec"):
        await queue.enqueue_many(specs)
    assert raw.count() == 0


# -- payloads too large for jsonb -------------------------------------------------


@pytest.fixture
def small_payload_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    """The payload limit lowered to 1,000 bytes of JSON, so that a test need not
    build 255 MiB strings to cross it."""
    monkeypatch.setattr(pgqueue.core.validation, "MAX_PAYLOAD_BYTES", 1000)
    return 1000


async def test_a_payload_over_the_size_limit_is_refused_and_writes_nothing(
    queue: Any, raw: Raw, small_payload_limit: int
) -> None:
    at_limit = "x" * (small_payload_limit - 2)  # with its quotes: exactly the limit
    over = {"blob": "x" * small_payload_limit}
    with pytest.raises(ValueError, match="payload is too large"):
        await queue.enqueue("k", over)
    with pytest.raises(ValueError, match="payload is too large"):
        await queue.enqueue("k", ["é" * (small_payload_limit // 6 + 1)])  # \u00e9: 6 bytes
    assert raw.count() == 0
    job = await queue.get(await queue.enqueue("k", at_limit))
    assert job.payload == at_limit


@pytest.mark.parametrize("size", [3, 500], ids=["insert", "copy"])
async def test_one_payload_over_the_size_limit_in_a_batch_writes_nothing(
    queue: Any, raw: Raw, small_payload_limit: int, size: int
) -> None:
    specs: list[Any] = [("ok", i) for i in range(size)]
    specs.insert(size // 2, JobSpec("big", "x" * small_payload_limit))
    with pytest.raises(ValueError, match="payload is too large"):
        await queue.enqueue_many(specs)
    specs[size // 2] = ("big", "x" * small_payload_limit)  # the fast path for repeated kinds
    specs.insert(0, ("big", 1))
    with pytest.raises(ValueError, match="payload is too large"):
        await queue.enqueue_many(specs)
    assert raw.count() == 0


def test_a_payload_just_over_jsonbs_limit_is_refused_before_any_statement() -> None:
    # The real limit, once and on no backend: the refusal comes when the
    # operation is built, before any connection is taken. PostgreSQL would
    # take seconds to receive this and then refuse it.
    limit = pgqueue.core.jobs.MAX_PAYLOAD_BYTES
    assert limit == 255 * 2**20
    huge = "x" * (limit - 1)  # its JSON text, with quotes: one byte over
    core = QueueCore("jobs")
    with pytest.raises(ValueError, match="payload is too large"):
        core.enqueue(JobSpec("k", huge))
    with pytest.raises(ValueError, match="payload is too large"):
        core.enqueue_many([("k", 1), JobSpec("k", huge)])


async def test_a_small_batch_of_heavy_payloads_is_written_with_copy(
    queue: Any, raw: Raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Payloads that together pass what one array parameter may carry go
    # through COPY, row by row, however few they are.
    monkeypatch.setattr(pgqueue.core.queue.enqueue, "COPY_PAYLOAD_BYTES", 100)
    payloads = [{"text": "a\tb\\c\nd" + "x" * 40, "n": n} for n in range(3)]
    light = queue.core.enqueue_many([("k", 1)] * 3).plan
    heavy = queue.core.enqueue_many([("k", p) for p in payloads]).plan
    for plan, step in [(light, Query), (heavy, Copy)]:
        next(plan)  # the ids
        assert isinstance(plan.send([(NOW, [1, 2, 3])]), step)
    ids = await queue.enqueue_many([("k", p) for p in payloads])
    assert [(await queue.get(i)).payload for i in ids] == payloads


@pytest.mark.parametrize(
    "name",
    ["jobs; DROP TABLE x", "a.b.c", "", "1jobs", 'my"jobs', "x" * 49, "jobs ", "schéma.jobs"],
)
async def test_unsafe_table_name_is_refused(dsn: str, backend: str, name: str) -> None:
    with pytest.raises(ValueError, match="table name"):
        async with open_queue(backend, dsn, table=name):
            pass


async def test_bad_claim_reap_and_fail_arguments(queue: Any, raw: Raw) -> None:
    await queue.enqueue("k")
    with pytest.raises(ValueError, match="limit"):
        await queue.claim(0)
    with pytest.raises(TypeError, match="single str"):
        await queue.claim(kinds="k")
    with pytest.raises(ValueError, match="at least one kind"):
        await queue.claim(kinds=[])
    with pytest.raises(TypeError, match="single str"):
        await queue.claim(queues="default")
    with pytest.raises(ValueError, match="at least one queue"):
        await queue.claim(queues=[])
    with pytest.raises(ValueError, match="worker"):
        await queue.claim(worker="")
    with pytest.raises(TypeError, match="timedelta"):
        await queue.reap(300)
    with pytest.raises(ValueError, match="positive"):
        await queue.reap(timedelta(seconds=-5))
    with pytest.raises(TypeError, match="Job or an int"):
        await queue.complete("1")
    [job] = await queue.claim()
    with pytest.raises(ValueError, match="retry_in"):
        await queue.fail(job, "x", retry_in=timedelta(seconds=-1))
    with pytest.raises(ValueError, match="retry_in must be at most"):
        await queue.fail(job, "x", retry_in=timedelta.max)
    with pytest.raises(TypeError, match="Job"):
        await queue.fail(job.id, "x")
    with pytest.raises(pgqueue.IllegalTransition):
        await queue.fail(replace(job, status=pgqueue.JobStatus.PENDING), "x")
    # The job is still exactly as the claim left it.
    assert raw.rows("SELECT status, attempts, last_error FROM {table}") == [("running", 1, None)]


async def test_wrong_connection_type_is_refused(queue: Any, raw: Raw) -> None:
    with pytest.raises(TypeError, match="conn must be"):
        await queue.enqueue("k", conn=object())
    assert raw.count() == 0
