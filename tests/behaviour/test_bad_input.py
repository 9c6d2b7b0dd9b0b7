"""SPEC §3: every bad input raises a clear exception and writes nothing."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import pgqueue
from pgqueue import JobSpec

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
