"""A job to enqueue, checked: every option of `enqueue` and `JobSpec`
validated before anything is written (`validate_spec`, `validate_specs`)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, Final

from .jobs import (
    ON_DUPLICATE,
    UNIQUE_SCOPES,
    Job,
    JobSpec,
    Unique,
    ValidatedSpec,
)
from .validation import (
    MAX_DELAY,
    encode_payload,
    validate_delay,
    validate_kind,
    validate_limit_key,
    validate_name,
    validate_priority,
    validate_queue,
    validate_timeout,
)

__all__ = [
    "MAX_DEPENDENCIES",
    "SpecLike",
    "validate_depends_on",
    "validate_spec",
    "validate_specs",
    "validate_unique",
]

_NO_DELAY: Final = timedelta(0)


SpecLike = JobSpec | tuple[str, Any]


def validate_spec(spec: JobSpec) -> ValidatedSpec:
    """Check one job (`enqueue`'s options, as the record they all take:
    `JobSpec`); raise TypeError or ValueError on the first bad one."""
    kind, payload, run_at, delay = spec.kind, spec.payload, spec.run_at, spec.delay
    max_attempts, result_ttl, limit_key = spec.max_attempts, spec.result_ttl, spec.limit_key
    kind = validate_kind(kind)
    queue = validate_queue(spec.queue)
    priority = validate_priority(spec.priority)
    rule = validate_unique(spec.unique_key, spec.unique, spec.unique_for, spec.on_duplicate)
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
        raise TypeError(f"max_attempts must be an int, not {type(max_attempts).__name__}")
    if not 1 <= max_attempts <= 2**31 - 1:
        raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
    if run_at is not None and delay is not None:
        raise ValueError("give run_at or delay, not both")
    if run_at is not None:
        if not isinstance(run_at, datetime):
            raise TypeError(f"run_at must be a datetime, not {type(run_at).__name__}")
        if run_at.tzinfo is None or run_at.utcoffset() is None:
            raise ValueError("run_at must be timezone-aware (a naive datetime is ambiguous)")
    delay = _NO_DELAY if delay is None else validate_delay(delay, "delay")
    if result_ttl is not None:
        result_ttl = validate_timeout(result_ttl, "result_ttl")
        if result_ttl > MAX_DELAY:
            raise ValueError(f"result_ttl must be at most {MAX_DELAY.days} days, got {result_ttl}")
    if limit_key is not None:
        limit_key = validate_limit_key(limit_key)
    parents = validate_depends_on(spec.depends_on)
    if parents and rule is not None:
        raise ValueError("a job with depends_on cannot have a unique_key (not supported yet)")
    payload_json = encode_payload(payload)
    return ValidatedSpec(kind, payload_json, run_at, delay, max_attempts, queue, priority, rule,
                         result_ttl, limit_key, parents)  # fmt: skip


# The most jobs one job may depend on directly (a group's `then` depends on
# every job of the group).
MAX_DEPENDENCIES: Final = 100_000


def validate_depends_on(depends_on: object) -> tuple[int, ...]:
    """``depends_on=``: a list (or tuple) of job ids, or None; repeats count once.

    >>> validate_depends_on([3, 1, 3])
    (3, 1)
    """
    if depends_on is None:
        return ()
    if not isinstance(depends_on, (list, tuple)):
        raise TypeError(f"depends_on must be a list of job ids, not {type(depends_on).__name__}")
    ids: dict[int, None] = {}
    for item in depends_on:
        if isinstance(item, Job):
            item = item.id
        if isinstance(item, bool) or not isinstance(item, int):
            raise TypeError(f"depends_on must hold job ids (int), not {type(item).__name__}")
        if not 1 <= item <= 2**63 - 1:
            raise ValueError(f"depends_on holds {item}, which is no job id")
        ids[item] = None
    if len(ids) > MAX_DEPENDENCIES:
        raise ValueError(f"a job may depend on at most {MAX_DEPENDENCIES:,} jobs")
    return tuple(ids)


def validate_unique(
    key: object, scope: object, window: object, on_duplicate: object
) -> Unique | None:
    """The uniqueness rule of one job, or None when it has no `unique_key`.

    ``unique``, ``unique_for`` and ``on_duplicate`` are checked even without a
    key, so that a typo is refused rather than silently ignored."""
    if scope not in UNIQUE_SCOPES:
        raise ValueError(
            f"unique must be one of {', '.join(map(repr, UNIQUE_SCOPES))}, got {scope!r}"
        )
    if on_duplicate not in ON_DUPLICATE:
        known = ", ".join(map(repr, ON_DUPLICATE))
        raise ValueError(f"on_duplicate must be one of {known}, got {on_duplicate!r}")
    if window is not None:
        window = validate_timeout(window, "unique_for")
        if window > MAX_DELAY:
            raise ValueError(f"unique_for must be at most {MAX_DELAY.days} days, got {window}")
    if key is None:
        if window is not None:
            raise ValueError("unique_for needs a unique_key")
        return None
    assert isinstance(scope, str) and isinstance(on_duplicate, str)
    return Unique(validate_name(key, "unique_key"), scope, window, on_duplicate)


def validate_specs(specs: Iterable[SpecLike]) -> list[ValidatedSpec]:
    """Validate every spec of a batch before anything is written."""
    checked: list[ValidatedSpec] = []
    valid_kinds: set[str] = set()  # a batch repeats a few kinds: check each once
    for spec in specs:
        if (
            type(spec) is tuple
            and len(spec) == 2
            and type(spec[0]) is str
            and spec[0] in valid_kinds
        ):
            checked.append(ValidatedSpec(spec[0], encode_payload(spec[1]), None, _NO_DELAY, 3))
        elif isinstance(spec, JobSpec):
            checked.append(validate_spec(spec))
        elif isinstance(spec, tuple) and len(spec) == 2:
            checked.append(validate_spec(JobSpec(spec[0], spec[1])))
            valid_kinds.add(spec[0])
        else:
            raise TypeError(f"expected a JobSpec or a (kind, payload) tuple, got {spec!r:.80}")
    return checked
