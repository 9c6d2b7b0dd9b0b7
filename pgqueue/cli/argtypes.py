"""The argparse types of the ``pgqueue`` command: each checks one argument or says why not."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from datetime import datetime, timedelta

from ..core.jobs import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    validate_kind,
    validate_limit_key,
    validate_queue,
    validate_table_name,
)
from ..core.migrations import validate_role
from ..core.schedules import validate_schedule_name


def _checked(validate: Callable[[str], object], text: str) -> str:
    """``text``, if ``validate`` takes it; else why not, as argparse reports it."""
    try:
        validate(text)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _int(text: str, what: str = "an integer") -> int:
    """``text`` as an integer; else, as argparse reports it, that it is not ``what``."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None


def _integer(text: str, minimum: int) -> int:
    value = _int(text)
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    return _integer(text, 1)


def non_negative_int(text: str) -> int:
    """An argparse type: an integer of 0 or more."""
    return _integer(text, 0)


def port(text: str) -> int:
    """An argparse type: a TCP port number, 1 to 65535."""
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"not a port number (1 to 65535): {value}")
    return value


def kind_list(text: str) -> list[str]:
    """An argparse type: comma-separated job kinds."""
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    if not kinds:
        raise argparse.ArgumentTypeError("name at least one kind")
    return kinds


def queue_name(text: str) -> str:
    """An argparse type: a queue's name, checked as `enqueue` checks it."""
    return _checked(validate_queue, text)


def queue_list(text: str) -> list[str]:
    """An argparse type: comma-separated queue names."""
    names = [queue_name(q.strip()) for q in text.split(",") if q.strip()]
    if not names:
        raise argparse.ArgumentTypeError("name at least one queue")
    return names


def priority(text: str) -> int:
    """An argparse type: a job's priority, an integer from -100 to 100."""
    value = _int(text)
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise argparse.ArgumentTypeError(
            f"must be from {MIN_PRIORITY} to {MAX_PRIORITY} (larger runs first), got {value}"
        )
    return value


_DURATION = re.compile(r"(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?")
_DURATION_UNITS = ("days", "hours", "minutes", "seconds")


def parse_duration(text: str) -> timedelta:
    """``90``, ``90s``, ``15m``, ``12h``, ``7d``, or units combined in that order (``1h30m``).

    >>> parse_duration("1h30m")
    datetime.timedelta(seconds=5400)
    """
    bad = argparse.ArgumentTypeError(
        f"not a duration: {text!r} (use e.g. 90, 90s, 15m, 12h, 7d or 1h30m)"
    )
    if re.fullmatch(r"[0-9]+", text):
        parts: dict[str, int] = {"seconds": int(text)}
    else:
        match = _DURATION.fullmatch(text)
        if match is None or not any(match.groups()):
            raise bad
        parts = {unit: int(n) for unit, n in zip(_DURATION_UNITS, match.groups(), strict=True) if n}
    try:
        return timedelta(**parts)
    except OverflowError:
        raise argparse.ArgumentTypeError(f"duration too long: {text!r}") from None


def positive_duration(text: str) -> timedelta:
    """An argparse type: a DURATION longer than zero."""
    value = parse_duration(text)
    if value <= timedelta(0):
        raise argparse.ArgumentTypeError(f"must be longer than 0, got {text!r}")
    return value


def job_id(text: str) -> int:
    """An argparse type: a job id (a positive bigint)."""
    value = _int(text, "a job id")
    if not 1 <= value <= 2**63 - 1:
        raise argparse.ArgumentTypeError(f"not a job id: {text!r}")
    return value


def table_name(text: str) -> str:
    """An argparse type: a safe table name, ``name`` or ``schema.name``."""
    return _checked(validate_table_name, text)


def role_name(text: str) -> str:
    """An argparse type: a role to grant to, checked as `Queue.grant` checks it."""
    return _checked(validate_role, text)


def kind_name(text: str) -> str:
    """An argparse type: a job kind, checked as `enqueue` checks it."""
    return _checked(validate_kind, text)


def limit_key(text: str) -> str:
    """An argparse type: a limit key."""
    return _checked(validate_limit_key, text)


def schedule_name(text: str) -> str:
    """An argparse type: a schedule's name."""
    return _checked(validate_schedule_name, text)


def worker_name(text: str) -> str:
    """An argparse type: a worker's name (``locked_by``), not blank."""
    if not text.strip():
        raise argparse.ArgumentTypeError("a worker's name must not be blank")
    return text


def run_at_time(text: str) -> datetime:
    """An argparse type: an ISO 8601 time with its UTC offset."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 time: {text!r} (e.g. 2030-01-31T09:00:00+01:00)"
        ) from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"give the time with its UTC offset, e.g. {text}+00:00 or {text}Z"
        )
    return value
