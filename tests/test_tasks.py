"""Tests of `pgqueue.core.tasks`: binding, payload, checks, registry, handlers. No database here.

What a task does against a real server (enqueue in a transaction, a
worker running it, nothing written for bad arguments) is in
``tests/behaviour/test_tasks.py``.
"""

from __future__ import annotations

import inspect
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pgqueue
from pgqueue.core.jobs import JobStatus
from pgqueue.core.specs import validate_specs
from pgqueue.core.tasks import (
    TaskCallError,
    TaskDefinition,
    TaskOptions,
    TaskRegistry,
    call_arguments,
    default_kind,
    task_of,
)


def send_receipt(order_id: int, email: str = "", *, resend: bool = False) -> str:
    return f"{order_id}:{email}:{resend}"


async def refund(order_id: int, amount: float) -> float:
    await anyio.lowlevel.checkpoint()
    return amount


def collect(*items: Any, **labels: Any) -> dict[str, Any]:
    return {"items": list(items), "labels": labels}


def only_positional(a: int, b: int, /) -> int:
    return a - b


def job_of(payload: Any, kind: str = "k") -> pgqueue.Job:
    """A job as a worker receives it: its payload read back from JSON."""
    now = datetime.now(UTC)
    return pgqueue.Job(1, kind, json.loads(json.dumps(payload)), 1, 3, JobStatus.RUNNING, now,
                       None, "w", now, now)  # fmt: skip


def run_handler(task: TaskDefinition[Any, Any], payload: Any) -> Any:
    handler = task.handler()
    if inspect.iscoroutinefunction(handler):
        return anyio.run(handler, job_of(payload, task.kind))
    return handler(job_of(payload, task.kind))


# -- the kind -------------------------------------------------------------------


def test_a_tasks_kind_defaults_to_its_functions_module_qualified_name() -> None:
    assert TaskDefinition(send_receipt, None, {}).kind == "tests.test_tasks.send_receipt"
    assert default_kind(refund) == "tests.test_tasks.refund"


def test_a_kind_given_is_the_tasks_kind_and_is_validated() -> None:
    assert TaskDefinition(send_receipt, "receipts.send", {}).kind == "receipts.send"
    with pytest.raises(ValueError, match="must not be empty"):
        TaskDefinition(send_receipt, " ", {})
    with pytest.raises(TypeError, match="must be a str"):
        TaskDefinition(send_receipt, 7, {})  # type: ignore[arg-type]


def test_a_task_must_be_a_function() -> None:
    with pytest.raises(TypeError, match="must be a function"):
        TaskDefinition(42, None, {})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not the class"):
        TaskDefinition(dict, None, {})


# -- binding and the payload ------------------------------------------------------


def test_arguments_are_bound_against_the_signature_and_kept_as_given() -> None:
    task = TaskDefinition(send_receipt, None, {})
    assert task.payload((7,), {}) == {"args": [7], "kwargs": {}}
    # Stored as given: the call was bound, so the function takes it as it is.
    assert task.payload((), {"order_id": 7, "resend": True}) == {
        "args": [],
        "kwargs": {"order_id": 7, "resend": True},
    }
    assert task.payload((7, "a@b.c"), {"resend": False}) == {
        "args": [7, "a@b.c"],
        "kwargs": {"resend": False},
    }


def test_defaults_are_not_stored_so_the_function_applies_its_own_when_it_runs() -> None:
    assert TaskDefinition(send_receipt, None, {}).payload((7,), {}) == {"args": [7], "kwargs": {}}


def test_var_positional_var_keyword_and_positional_only_arguments_bind() -> None:
    assert TaskDefinition(collect, None, {}).payload((1, 2), {"x": "y"}) == {
        "args": [1, 2],
        "kwargs": {"x": "y"},
    }
    assert TaskDefinition(only_positional, None, {}).payload((5, 3), {}) == {
        "args": [5, 3],
        "kwargs": {},
    }


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, "missing a required argument: 'order_id'"),
        ((1, "e", True), {}, "too many positional arguments"),
        ((1,), {"colour": "red"}, "unexpected keyword argument 'colour'"),
        ((1,), {"order_id": 2}, "multiple values for argument 'order_id'"),
    ],
)
def test_arguments_that_do_not_fit_the_signature_are_refused_naming_the_task(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    task = TaskDefinition(send_receipt, "receipts.send", {})
    with pytest.raises(TypeError, match=f"bad arguments for task receipts.send: .*{message}"):
        task.payload(args, kwargs)


def test_positional_only_parameters_cannot_be_given_by_name() -> None:
    with pytest.raises(TypeError, match="bad arguments"):
        TaskDefinition(only_positional, None, {}).payload((), {"a": 1, "b": 2})


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (datetime(2026, 1, 1, tzinfo=UTC), TypeError, r"email is a datetime, which is not JSON"),
        ({"a": {1: "x"}}, TypeError, r"email\['a'\] has the key 1 \(int\)"),
        ([1, float("nan")], ValueError, r"email\[1\] is nan"),
        ({"when": {1, 2}}, TypeError, r"email\['when'\] is a set"),
        (b"bytes", TypeError, r"email is a bytes"),
    ],
)
def test_an_argument_json_would_not_carry_unchanged_is_refused_naming_where(
    value: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        TaskDefinition(send_receipt, None, {}).payload((1, value), {})


def test_an_argument_that_contains_itself_is_refused() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    with pytest.raises(ValueError, match="contains itself"):
        TaskDefinition(send_receipt, None, {}).payload((1, loop), {})


def test_a_value_shared_twice_in_the_arguments_is_not_mistaken_for_a_cycle() -> None:
    shared = {"a": 1}
    assert TaskDefinition(collect, None, {}).payload((shared, [shared]), {})["args"] == [
        shared,
        [shared],
    ]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


@given(items=st.lists(_json, max_size=4), labels=st.dictionaries(st.text(), _json, max_size=4))
def test_the_handler_calls_the_function_with_the_arguments_enqueued(
    items: list[Any], labels: dict[str, Any]
) -> None:
    task = TaskDefinition(collect, None, {})
    payload = task.payload(tuple(items), labels)
    assert run_handler(task, payload) == {"items": items, "labels": labels}


# -- the handler ---------------------------------------------------------------------


def test_a_plain_tasks_handler_is_a_plain_function_and_returns_the_functions_value() -> None:
    task = TaskDefinition(send_receipt, None, {})
    assert not inspect.iscoroutinefunction(task.handler())
    assert run_handler(task, task.payload((7,), {"resend": True})) == "7::True"


def test_an_async_tasks_handler_is_a_coroutine_function_as_async_handlers_are() -> None:
    task = TaskDefinition(refund, None, {})
    assert task.is_async and inspect.iscoroutinefunction(task.handler())
    assert run_handler(task, task.payload((7, 2.5), {})) == 2.5


def test_a_payload_may_leave_out_empty_args_or_kwargs() -> None:
    assert call_arguments(job_of({"kwargs": {"order_id": 1}})) == ([], {"order_id": 1})
    assert call_arguments(job_of({"args": [1]})) == ([1], {})
    assert call_arguments(job_of({})) == ([], {})


@pytest.mark.parametrize(
    "payload", [None, [1, 2], {"order_id": 1}, {"args": {"a": 1}}, {"kwargs": [1]}]
)
def test_a_payload_that_is_not_a_call_fails_the_job_with_a_clear_error(payload: Any) -> None:
    with pytest.raises(TaskCallError, match="not a call of the task"):
        run_handler(TaskDefinition(send_receipt, None, {}), payload)


# -- options -------------------------------------------------------------------------


def test_the_decorators_options_are_every_jobs_options() -> None:
    task = TaskDefinition(send_receipt, "r", {"queue": "mail", "priority": 5, "max_attempts": 9,
                                              "delay": timedelta(seconds=30)})  # fmt: skip
    spec = task.spec(task.options, (1,), {})
    assert (spec.kind, spec.queue, spec.priority, spec.max_attempts, spec.delay) == (
        "r",
        "mail",
        5,
        9,
        timedelta(seconds=30),
    )
    assert spec.payload == {"args": [1], "kwargs": {}}


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"priority": 101}, ValueError, "priority must be from -100 to 100"),
        ({"max_attempts": 0}, ValueError, "max_attempts must be at least 1"),
        ({"unique": "sometimes"}, ValueError, "unique must be one of"),
        ({"delay": 5}, TypeError, "delay must be a timedelta"),
        ({"unique_key": 5}, TypeError, "unique_key must be a str or a function"),
        ({"conn": None}, TypeError, "unknown job option 'conn'"),
        ({"order_id": 1}, TypeError, "unknown job option 'order_id'"),
    ],
)
def test_bad_options_are_refused_when_the_task_is_made(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        TaskDefinition(send_receipt, None, options)  # type: ignore[arg-type]


def test_run_at_is_given_per_call_not_to_the_decorator() -> None:
    with pytest.raises(TypeError, match="run_at is given per call"):
        TaskDefinition(send_receipt, None, {"run_at": datetime.now(UTC)})  # type: ignore[typeddict-unknown-key]


def test_changed_options_leave_the_originals_alone_and_are_validated() -> None:
    base = TaskOptions()
    later = base.changed("k", {"priority": 3})
    assert (base.priority, later.priority) == (0, 3)
    with pytest.raises(ValueError, match="give run_at or delay, not both"):
        later.changed("k", {"run_at": datetime.now(UTC), "delay": timedelta(1)})


def test_unique_and_limit_keys_may_be_functions_of_the_tasks_arguments() -> None:
    task = TaskDefinition(
        send_receipt,
        None,
        {
            "unique_key": lambda order_id, *a, **k: f"receipt:{order_id}",
            "limit_key": lambda *a, **k: "mailer",
        },
    )
    spec = task.spec(task.options, (), {"order_id": 7, "resend": True})
    assert (spec.unique_key, spec.limit_key) == ("receipt:7", "mailer")


def test_a_key_function_that_returns_no_str_is_refused() -> None:
    task = TaskDefinition(send_receipt, None, {"unique_key": lambda *a, **k: 7})  # type: ignore[typeddict-item]
    with pytest.raises(TypeError, match=r"unique_key function of task .* returned int 7"):
        task.spec(task.options, (1,), {})


def test_specs_take_tuples_of_positional_and_dicts_of_keyword_arguments() -> None:
    task = TaskDefinition(send_receipt, None, {})
    specs = task.specs(task.options, [(1,), {"order_id": 2, "resend": True}])
    assert [s.payload for s in specs] == [
        {"args": [1], "kwargs": {}},
        {"args": [], "kwargs": {"order_id": 2, "resend": True}},
    ]
    assert len(validate_specs(specs)) == 2


@pytest.mark.parametrize("calls", [[[1]], [1], "abc", {"order_id": 1}])
def test_specs_refuse_what_is_not_a_collection_of_calls(calls: Any) -> None:
    task = TaskDefinition(send_receipt, None, {})
    with pytest.raises(TypeError, match="enqueue_many of task"):
        task.specs(task.options, calls)


# -- the registry --------------------------------------------------------------------


def test_a_second_function_for_a_kind_is_refused_the_same_one_is_not() -> None:
    registry = TaskRegistry()
    registry.add(TaskDefinition(send_receipt, "r", {}))
    registry.add(TaskDefinition(send_receipt, "r", {}))
    with pytest.raises(ValueError, match="has a task of kind 'r' already"):
        registry.add(TaskDefinition(refund, "r", {}))
    assert registry.kinds() == ["r"]


def test_the_registrys_handlers_merge_with_explicit_ones_but_never_shadow_a_task() -> None:
    registry = TaskRegistry()
    registry.add(TaskDefinition(send_receipt, "r", {}))

    def other(job: pgqueue.Job) -> None: ...

    assert sorted(registry.handlers({"other": other})) == ["other", "r"]
    # A task's own handler, passed on by a copied worker, is the task: no conflict.
    task = registry.get("r")
    assert task is not None and task_of(task.handler()) is task
    assert registry.handlers({"r": task.handler()}) == {"r": task.handler()}
    assert task_of(other) is None
    with pytest.raises(ValueError, match="job kind 'r' has a handler and is a task"):
        registry.handlers({"r": other})


# -- the workers' constructors (no connection is made) -------------------------------

UNREACHABLE = "postgresql://nobody@127.0.0.1:1/none"


def test_the_sync_worker_takes_an_async_task_but_still_refuses_an_async_handler() -> None:
    queue = pgqueue.Queue(UNREACHABLE)
    try:
        task = queue.task(refund)
        assert pgqueue.Worker(queue).handlers.is_async(task.kind)

        async def handler(job: pgqueue.Job) -> None: ...

        with pytest.raises(TypeError, match="use AsyncWorker for async handlers"):
            pgqueue.Worker(queue, {"other": handler})
    finally:
        queue.close()


def test_a_worker_takes_the_tasks_registered_before_it_is_made() -> None:
    queue = pgqueue.AsyncQueue(UNREACHABLE)
    queue.task(send_receipt)
    worker = pgqueue.AsyncWorker(queue)
    queue.task(kind="later")(refund)
    assert worker.handlers.kinds() == ["tests.test_tasks.send_receipt"]
    assert pgqueue.AsyncWorker(queue).handlers.kinds() == [
        "later",
        "tests.test_tasks.send_receipt",
    ]
