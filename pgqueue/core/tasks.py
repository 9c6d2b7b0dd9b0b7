"""Tasks: typed functions made job kinds (`AsyncQueue.task`, `Queue.task`), with no I/O.

A task's jobs carry the arguments of one call of its function, bound at
enqueue against the function's signature, checked to be JSON, and kept as
given in the payload ``{"args": [...], "kwargs": {...}}``. The worker's handler for the
task's kind reads them back and calls the function. What is decided here
(the kind, the binding, the payload's shape, the checks, the registry of a
queue's tasks, the handler) serves the sync and async queues alike; they
only add the enqueue calls.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, ParamSpec, TypedDict, TypeVar

from .jobs import DEFAULT_QUEUE, Job, JobSpec, validate_kind
from .specs import validate_spec
from .typed import PayloadMismatch, SignatureCodecs, signature_codecs

__all__ = [
    "TaskCallError",
    "TaskDefaults",
    "TaskDefinition",
    "TaskOptions",
    "TaskOverrides",
    "TaskRegistry",
    "call_arguments",
    "default_kind",
    "task_of",
    "task_payload",
]

P = ParamSpec("P")
R = TypeVar("R")

# The payload's two keys: the positional and the keyword arguments of the call.
ARGS, KWARGS = "args", "kwargs"

# The job options a task takes per call (`AsyncTask.options`), not as defaults.
PER_CALL = frozenset({"run_at", "depends_on"})

# A job option given as a function of the task's arguments (``unique_key``, ``limit_key``).
KeyFunction = Callable[..., str]


class TaskDefaults(TypedDict, total=False):
    """The job options a task's decorator takes (`AsyncQueue.task`); each is the
    ``enqueue`` option of that name, applied to every job of the task."""

    queue: str
    priority: int
    max_attempts: int
    delay: timedelta | None
    unique_key: str | KeyFunction | None
    unique: str
    unique_for: timedelta | None
    on_duplicate: str
    result_ttl: timedelta | None
    limit_key: str | KeyFunction | None


class TaskOverrides(TaskDefaults, total=False):
    """The job options `AsyncTask.options` takes: the decorator's, and those
    given per call, ``run_at`` and ``depends_on``."""

    run_at: datetime | None
    depends_on: Sequence[int] | None


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """The enqueue options of a task's jobs, validated: the decorator's, then
    those of `AsyncTask.options`. ``unique_key`` and ``limit_key`` may be
    functions, called with the task's arguments at each enqueue."""

    queue: str = DEFAULT_QUEUE
    priority: int = 0
    max_attempts: int = 3
    run_at: datetime | None = None
    delay: timedelta | None = None
    unique_key: str | KeyFunction | None = None
    unique: str = "queued"
    unique_for: timedelta | None = None
    on_duplicate: str = "return"
    result_ttl: timedelta | None = None
    limit_key: str | KeyFunction | None = None
    depends_on: Sequence[int] | None = None

    def changed(self, kind: str, changes: Mapping[str, Any]) -> TaskOptions:
        """These options with ``changes`` applied, checked as ``enqueue`` checks
        them: TypeError or ValueError on an unknown or a bad one."""
        known = {f.name for f in dataclasses.fields(self)}
        for name in changes:
            if name not in known:
                raise TypeError(
                    f"unknown job option {name!r} for task {kind}: the options are "
                    f"{', '.join(sorted(known))} (the function's own arguments go to enqueue)"
                )
        options = dataclasses.replace(self, **changes)
        options.check(kind)
        return options

    def check(self, kind: str) -> None:
        """Refuse what ``enqueue`` would refuse, before any job is made."""
        for name in ("unique_key", "limit_key"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str) and not callable(value):
                raise TypeError(
                    f"{name} must be a str or a function of the task's arguments, "
                    f"not {type(value).__name__}"
                )
        # A function's keys are checked when the queue takes the job; a
        # stand-in for them here.
        validate_spec(self._job(kind, None, _stand_in(self.unique_key), _stand_in(self.limit_key)))

    def spec(
        self, kind: str, payload: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> JobSpec:
        """The job of one call (``unique_key`` and ``limit_key`` computed from
        its arguments when they are functions); the queue validates it."""
        unique_key, limit_key = self.unique_key, self.limit_key
        if unique_key is not None and not isinstance(unique_key, str):
            unique_key = _key(unique_key, "unique_key", kind, args, kwargs)
        if limit_key is not None and not isinstance(limit_key, str):
            limit_key = _key(limit_key, "limit_key", kind, args, kwargs)
        return self._job(kind, payload, unique_key, limit_key)

    def _job(
        self, kind: str, payload: Any, unique_key: str | None, limit_key: str | None
    ) -> JobSpec:
        # Positional: a batch makes one per job, and keywords cost twice as much.
        return JobSpec(kind, payload, self.run_at, self.delay, self.max_attempts, self.queue,
                       self.priority, unique_key, self.unique, self.unique_for,
                       self.on_duplicate, self.result_ttl, limit_key,
                       self.depends_on)  # fmt: skip


def _stand_in(value: str | KeyFunction | None) -> str | None:
    return "key" if callable(value) else value


def _key(
    fn: KeyFunction, name: str, kind: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> str:
    key = fn(*args, **kwargs)
    if not isinstance(key, str):
        raise TypeError(f"the {name} function of task {kind} returned "
                        f"{type(key).__name__} {key!r:.80}, not a str")  # fmt: skip
    return key


def default_kind(fn: Callable[..., Any]) -> str:
    """A task's kind unless given: its function's module-qualified name."""
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if not isinstance(name, str):
        raise TypeError(f"cannot name a task after {fn!r}: give it a kind=")
    return f"{module}.{name}" if module else name


class TaskCallError(TypeError):
    """A task's job whose payload is not a call of its function
    (``{"args": [...], "kwargs": {...}}``): it was not enqueued by the task."""


def task_payload(
    signature: inspect.Signature,
    kind: str,
    args: tuple[Any, ...] | list[Any],
    kwargs: Mapping[str, Any],
    codecs: SignatureCodecs | None = None,
) -> dict[str, Any]:
    """The payload of one call: its arguments, bound against ``signature``,
    encoded by their annotations (``codecs``: `pgqueue.core.typed`) and
    checked to come back from JSON as they went in; TypeError or ValueError
    naming the argument otherwise."""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"bad arguments for task {kind}: {exc}") from None
    if codecs is not None:
        try:
            args, kwargs = codecs.encode(args, kwargs)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"task {kind}: {exc}") from None
        bound = signature.bind(*args, **kwargs)
    for name, value in bound.arguments.items():
        _check_json(value, name, kind, set())
    # Stored as given: `bind` took the call, so the function takes it too.
    return {ARGS: list(args), KWARGS: dict(kwargs)}


def _check_json(value: Any, path: str, kind: str, parents: set[int]) -> None:
    """Refuse what JSON cannot carry to the function unchanged, saying where.

    Tuples are allowed (they arrive as lists); a dict key that is not a str
    is refused (JSON would turn it into one, silently); so are NaN and the
    infinities (jsonb has none)."""
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"task {kind}: argument {path} is {value!r}, which JSON cannot hold")
        return
    if isinstance(value, (list, tuple, dict)):
        if id(value) in parents:
            raise ValueError(f"task {kind}: argument {path} contains itself")
        parents.add(id(value))
        try:
            if isinstance(value, dict):
                for key, item in value.items():
                    if not isinstance(key, str):
                        raise TypeError(
                            f"task {kind}: argument {path} has the key {key!r} "
                            f"({type(key).__name__}): JSON keys are text, so the function "
                            f"would receive {str(key)!r}; use str keys"
                        )
                    _check_json(item, f"{path}[{key!r}]", kind, parents)
            else:
                for i, item in enumerate(value):
                    _check_json(item, f"{path}[{i}]", kind, parents)
        except RecursionError:
            raise ValueError(f"task {kind}: argument {path} is nested too deeply") from None
        finally:
            parents.discard(id(value))
        return
    raise TypeError(
        f"task {kind}: argument {path} is a {type(value).__name__}, which is not "
        "JSON-serialisable: pass what JSON holds (str, int, float, bool, None, "
        "lists and dicts of them), e.g. an id or an ISO date string"
    )


def call_arguments(job: Job) -> tuple[list[Any], dict[str, Any]]:
    """The positional and keyword arguments a task's job carries."""
    payload = job.payload
    if isinstance(payload, dict) and payload.keys() <= {ARGS, KWARGS}:
        args = payload.get(ARGS, [])
        kwargs = payload.get(KWARGS, {})
        if isinstance(args, list) and isinstance(kwargs, dict):
            return args, kwargs
    raise TaskCallError(
        f"job {job.id} of task {job.kind} has a payload that is not a call of the task "
        f'(expected {{"args": [...], "kwargs": {{...}}}}, got {payload!r:.200})'
    )


# Set on a task's handler: the task it runs.
_TASK_ATTRIBUTE = "__pgqueue_task__"


def task_of(handler: object) -> TaskDefinition[Any, Any] | None:
    """The task whose handler this is (`TaskDefinition.handler`), or None: a
    worker copied with its handlers (``pgqueue worker --concurrency``) passes
    its tasks' handlers on as handlers."""
    task = getattr(handler, _TASK_ATTRIBUTE, None)
    return task if isinstance(task, TaskDefinition) else None


class TaskDefinition(Generic[P, R]):
    """A function made a job kind: its signature, its kind, its default options,
    and the handler a worker runs its jobs with."""

    def __init__(self, fn: Callable[P, R], kind: str | None, defaults: TaskDefaults) -> None:
        if not callable(fn):
            raise TypeError(f"a task must be a function, not {type(fn).__name__}")
        if isinstance(fn, type):
            raise TypeError(f"a task must be a function, not the class {fn.__name__}")
        self.fn = fn
        self.kind = validate_kind(default_kind(fn) if kind is None else kind)
        try:
            self.signature = inspect.signature(fn)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"cannot read the signature of task {self.kind}: {exc}") from None
        self.is_async = inspect.iscoroutinefunction(fn)
        # Typed parameters (`pgqueue.core.typed`): encoded at enqueue, decoded to run.
        self.codecs = signature_codecs(fn, self.signature)
        for name in PER_CALL.intersection(defaults):
            raise TypeError(f"a task's {name} is given per call: task.options({name}=...)")
        self.options = TaskOptions().changed(self.kind, defaults)
        self._handler = self._make_handler()

    def payload(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The payload of a call with these arguments (see `task_payload`)."""
        return task_payload(self.signature, self.kind, args, kwargs, self.codecs)

    def arguments(self, job: Job) -> tuple[list[Any], dict[str, Any]]:
        """The arguments a job of the task carries, decoded into their types;
        `TaskCallError` or `pgqueue.core.typed.PayloadMismatch` (naming the
        field) when they no longer fit."""
        args, kwargs = call_arguments(job)
        if self.codecs is None:
            return args, kwargs
        try:
            return self.codecs.decode(args, kwargs)
        except PayloadMismatch as exc:
            raise PayloadMismatch(f"job {job.id} of task {job.kind}: {exc}") from None

    def spec(
        self, options: TaskOptions, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> JobSpec:
        """The job of a call with these arguments and options, every part checked."""
        return options.spec(self.kind, self.payload(args, kwargs), args, kwargs)

    def specs(
        self, options: TaskOptions, calls: Iterable[tuple[Any, ...] | Mapping[str, Any]]
    ) -> list[JobSpec]:
        """The jobs of many calls: each a tuple of positional arguments or a
        mapping of keyword arguments."""
        if isinstance(calls, (str, bytes, Mapping)):
            raise TypeError(
                f"enqueue_many of task {self.kind} takes a collection of calls, "
                f"not a {type(calls).__name__}"
            )
        specs = []
        for call in calls:
            if isinstance(call, tuple):
                specs.append(self.spec(options, call, {}))
            elif isinstance(call, Mapping):
                specs.append(self.spec(options, (), call))
            else:
                raise TypeError(
                    f"each call of enqueue_many of task {self.kind} is a tuple of positional "
                    f"arguments or a dict of keyword arguments, not a {type(call).__name__} "
                    "(for both, use queue.enqueue_many with task.spec(...))"
                )
        return specs

    def handler(self) -> Callable[[Job], Any]:
        """The worker's handler: call the function with the job's arguments
        (a coroutine function for an ``async def`` task, so that it runs as
        async handlers do). The same one each time; `task_of` knows it."""
        return self._handler

    def _make_handler(self) -> Callable[[Job], Any]:
        fn: Callable[..., Any] = self.fn
        handler: Callable[[Job], Any]
        if self.is_async:

            async def run_async_task(job: Job) -> Any:
                args, kwargs = self.arguments(job)
                return await fn(*args, **kwargs)

            handler = run_async_task
        else:

            def run_task(job: Job) -> Any:
                args, kwargs = self.arguments(job)
                return fn(*args, **kwargs)

            handler = run_task
        setattr(handler, _TASK_ATTRIBUTE, self)
        return handler

    def __repr__(self) -> str:
        return f"<task {self.kind} {self.signature}>"


class TaskRegistry:
    """A queue's tasks, by kind: what its workers run when given no handlers."""

    def __init__(self) -> None:
        self._by_kind: dict[str, TaskDefinition[Any, Any]] = {}

    def add(self, task: TaskDefinition[Any, Any]) -> None:
        """Register ``task``; a second function for one kind is refused."""
        known = self._by_kind.get(task.kind)
        if known is not None and known.fn is not task.fn:
            raise ValueError(
                f"this queue has a task of kind {task.kind!r} already ({known.fn!r}): "
                "give one of them another kind="
            )
        self._by_kind[task.kind] = task

    def get(self, kind: str) -> TaskDefinition[Any, Any] | None:
        return self._by_kind.get(kind)

    def kinds(self) -> list[str]:
        return sorted(self._by_kind)

    def __len__(self) -> int:
        return len(self._by_kind)

    def handlers(
        self, explicit: Mapping[str, Callable[..., Any]] | None = None
    ) -> dict[str, Callable[..., Any]]:
        """Every task's handler, with ``explicit`` handlers merged in; a kind
        that is both a task and an explicit handler is refused."""
        merged = {kind: task.handler() for kind, task in self._by_kind.items()}
        for kind, fn in (explicit or {}).items():
            if kind in merged and fn is not merged[kind]:
                raise ValueError(
                    f"job kind {kind!r} has a handler and is a task of the queue: "
                    "a task's jobs are run by the task; drop the handler or give "
                    "the task another kind="
                )
            merged[kind] = fn
        return merged
