"""The generic validators: what a name, a kind, a priority, a delay, a count or
a table name must be. A bad argument is refused before any connection is
taken. The job model and the validation of a whole job are in
`pgqueue.core.jobs`."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, Final

__all__ = [
    "MAX_BURST",
    "MAX_PAYLOAD_BYTES",
    "MAX_DELAY",
    "MAX_IDENTIFIER_LENGTH",
    "MAX_KIND_LENGTH",
    "MAX_NAME_LENGTH",
    "MAX_PRIORITY",
    "MAX_RATE",
    "MAX_TABLE_NAME_LENGTH",
    "MIN_PRIORITY",
    "encode_payload",
    "error_text",
    "refuse_control",
    "validate_age",
    "validate_claim_bytes",
    "validate_delay",
    "validate_job_id",
    "validate_kind",
    "validate_kinds",
    "validate_limit",
    "validate_limit_key",
    "validate_name",
    "validate_priority",
    "validate_queue",
    "validate_queues",
    "validate_rate",
    "validate_table_name",
    "validate_timeout",
    "wrong_connection",
]

MAX_KIND_LENGTH = 255
# PostgreSQL truncates identifiers (names of tables, indexes, channels) at 63 bytes.
MAX_IDENTIFIER_LENGTH = 63
# Index names are "<table>_ready" and so on.
MAX_TABLE_NAME_LENGTH = 48
# A job's priority: larger runs first.
MIN_PRIORITY, MAX_PRIORITY = -100, 100
# Names of queues, unique keys and schedules.
MAX_NAME_LENGTH = 255
# The longest delay a job may be given: a bound well inside what Python's
# datetime (year 9999) reads back, far beyond any real schedule.
MAX_DELAY = timedelta(days=365 * 1000)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# The largest payload accepted, measured as the JSON text pgqueue sends
# (all ASCII, so a character is a byte). jsonb refuses a string, array or
# object whose stored form passes 2**28 - 1 bytes (just under 256 MiB), but
# only after the whole text has crossed the wire (about 10 s for 256 MiB on
# a local socket); a message over 1 GB drops the connection. A MiB under
# jsonb's bound leaves room for the bytes jsonb adds around each value. The
# bound is on the text, not the stored form, which can be larger (a number
# is 1 or 2 characters of JSON, 8 or more bytes of jsonb): PostgreSQL may
# still refuse a payload under it, and then too nothing is written. Read at
# each call, so that a test can lower it.
MAX_PAYLOAD_BYTES = 255 * 2**20
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
# One encoder for every payload: building one per call costs more than encoding.
_JSON = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
# The same, without escaping non-ASCII: only to find lone surrogates, which jsonb refuses.
_JSON_UNESCAPED = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False)


def validate_kind(kind: object) -> str:
    if not isinstance(kind, str):
        raise TypeError(f"job kind must be a str, not {type(kind).__name__}")
    if not kind.strip():
        raise ValueError("job kind must not be empty")
    if "\x00" in kind:
        raise ValueError("job kind must not contain NUL characters")
    if not kind.isascii():
        try:
            kind.encode()
        except UnicodeEncodeError:
            raise ValueError(
                "job kind must be valid Unicode text (it has a lone surrogate)"
            ) from None
    if len(kind) > MAX_KIND_LENGTH:
        raise ValueError(f"job kind is longer than {MAX_KIND_LENGTH} characters")
    return kind


def validate_kinds(kinds: Iterable[str] | None) -> list[str] | None:
    """Validate a worker's or claim's `kinds=` filter; None means every kind."""
    return _names_filter(kinds, "kinds", "kind", validate_kind)


def _names_filter(
    values: Iterable[str] | None, what: str, one: str, check: Callable[[str], str]
) -> list[str] | None:
    """A filter of ``what`` (``"kinds"``, ``"queues"``): each name passed to
    ``check``, in the order given; None (every one) stays None, and a filter
    that names nothing, or a lone str, is refused."""
    if values is None:
        return None
    if isinstance(values, str):
        raise TypeError(f"{what} must be a collection of str, not a single str")
    checked = [check(value) for value in values]
    if not checked:
        raise ValueError(f"{what} must name at least one {one} (or be None for all {what})")
    return checked


def validate_limit_key(key: object) -> str:
    """The key of a concurrency limit (`limit_key=`, `set_limit`)."""
    return validate_name(key, "limit_key")


MAX_RATE: Final = 1_000_000.0  # jobs a second, for one key
MAX_BURST: Final = 1_000_000


def validate_rate(per_second: object, burst: object) -> tuple[float | None, int | None]:
    """A rate limit (`set_rate`): jobs a second, and how many may start at
    once after a pause (default: one second's worth, at least 1); None and
    None to remove it."""
    if per_second is None:
        if burst is not None:
            raise ValueError("a burst needs a rate: give per_second too")
        return None, None
    if isinstance(per_second, bool) or not isinstance(per_second, (int, float)):
        raise TypeError(f"per_second must be a number, not {type(per_second).__name__}")
    if not 0 < per_second <= MAX_RATE:  # NaN fails this too
        raise ValueError(
            f"per_second must be above 0 and at most {MAX_RATE:,.0f}, got {per_second}"
        )
    if burst is None:
        burst = max(1, math.ceil(per_second))
    count = _int(burst, "burst")
    if not 1 <= count <= MAX_BURST:
        raise ValueError(f"burst must be from 1 to {MAX_BURST:,}, got {count}")
    return float(per_second), count


def validate_name(value: object, what: str) -> str:
    """A queue name or a unique key: non-empty text that a text column stores."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{what} must not be empty")
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL characters")
    if len(value) > MAX_NAME_LENGTH:
        raise ValueError(f"{what} is longer than {MAX_NAME_LENGTH} characters")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise ValueError(f"{what} must be valid Unicode text (it has a lone surrogate)") from None
    return value


def validate_queue(queue: object) -> str:
    """A queue's name: also no control character (names reach log lines and pages)."""
    return refuse_control(validate_name(queue, "queue name"), "queue name")


def refuse_control(value: str, what: str) -> str:
    """``value``, if it holds no control character (a newline could forge a log line)."""
    if any(c < " " or "\x7f" <= c <= "\x9f" for c in value):
        raise ValueError(f"{what} must not contain control characters (newline, tab ...)")
    return value


def validate_queues(queues: Iterable[str] | None) -> list[str] | None:
    """A worker's `queues=`: the queues it serves; None means every queue."""
    checked = _names_filter(queues, "queues", "queue", validate_queue)
    return None if checked is None else sorted(set(checked))


def validate_priority(priority: object) -> int:
    """A priority: an int from -100 to 100, larger first."""
    checked = _int(priority, "priority")
    if not MIN_PRIORITY <= checked <= MAX_PRIORITY:
        raise ValueError(
            f"priority must be from {MIN_PRIORITY} to {MAX_PRIORITY} (larger runs first), "
            f"got {checked}"
        )
    return checked


def validate_delay(value: object, name: str) -> timedelta:
    """A wait before a job is due (``delay``, ``retry_in``): from 0 to `MAX_DELAY`."""
    delay = validate_age(value, name)
    if delay > MAX_DELAY:
        raise ValueError(f"{name} must be at most {MAX_DELAY.days} days, got {delay}")
    return delay


def validate_table_name(table: object) -> tuple[str, ...]:
    """Split `table` or `schema.table` into its parts, refusing anything unsafe."""
    if not isinstance(table, str):
        raise TypeError(f"table name must be a str, not {type(table).__name__}")
    parts = tuple(table.split("."))
    if len(parts) > 2 or not all(_IDENTIFIER.match(p) for p in parts):
        raise ValueError(
            f"unsafe table name {table!r}: use letters, digits and underscores, "
            "optionally as schema.table"
        )
    if len(parts[-1]) > MAX_TABLE_NAME_LENGTH or len(parts[0]) > MAX_IDENTIFIER_LENGTH:
        raise ValueError(f"table name {table!r} is too long (at most {MAX_TABLE_NAME_LENGTH})")
    # pg_temp (a session's own schema: its jobs vanish with the connection)
    # and the system schemas are no place for a queue.
    if len(parts) == 2 and (parts[0].lower().startswith("pg_") or parts[0] == "information_schema"):
        raise ValueError(
            f"table name {table!r} is in a temporary or system schema: choose another schema"
        )
    return parts


def wrong_connection(conn: object, expected: str) -> TypeError:
    """The error for a ``conn=`` that is not a psycopg connection: its full
    type name, and for a framework's own connection object, the helper that
    gives the psycopg connection under it."""
    kind = type(conn)
    name = f"{kind.__module__}.{kind.__qualname__}"
    hint = ""
    if kind.__module__.split(".")[0] == "sqlalchemy":
        hint = (
            "; from a SQLAlchemy session, pass pgqueue.contrib.sqlalchemy.psycopg_connection"
            "(session) (async: async_psycopg_connection)"
        )
    elif kind.__module__.split(".")[0] == "django":
        hint = "; in Django, pgqueue.contrib.django.connection() is the psycopg connection"
    return TypeError(f"conn must be {expected}, not {name}{hint}")


def validate_limit(limit: object, name: str = "limit") -> int:
    """A count of at least 1 (a claim's limit, a concurrency), named as the caller names it."""
    count = _int(limit, name)
    if count < 1:
        raise ValueError(f"{name} must be at least 1, got {count}")
    return count


def validate_timeout(value: object, name: str) -> timedelta:
    timeout = _timedelta(value, name)
    if timeout <= timedelta(0):
        raise ValueError(f"{name} must be positive, got {timeout}")
    return timeout


def error_text(error: object) -> str:
    """What a failure stores in `last_error`: the exception type and message."""
    if isinstance(error, BaseException):
        message = str(error)
        text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    else:
        text = str(error)
    # text columns cannot hold NUL; keep the rest as it is.
    return text.replace("\x00", "\\0")


def validate_claim_bytes(value: object) -> int | None:
    """A worker's byte budget per claim: a positive int, or None for none."""
    return None if value is None else validate_limit(value, "claim_bytes")


def validate_age(value: object, name: str) -> timedelta:
    """A timedelta of zero or more, for ``older_than=``-style arguments."""
    age = _timedelta(value, name)
    if age < timedelta(0):
        raise ValueError(f"{name} must not be negative, got {age}")
    return age


def validate_job_id(value: object, name: str) -> int:
    """A job id given as an int (a bool is refused)."""
    return _int(value, name)


def _int(value: object, name: str) -> int:
    """``value``, if it is an int and not a bool (which Python counts as one)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return value


def _timedelta(value: object, name: str) -> timedelta:
    """``value``, if it is a timedelta."""
    if not isinstance(value, timedelta):
        raise TypeError(f"{name} must be a timedelta, not {type(value).__name__}")
    return value


def encode_payload(payload: Any) -> str:
    """Encode a payload as JSON text, refusing what PostgreSQL's jsonb would refuse."""
    try:
        text = _JSON.encode(payload)
    except (TypeError, ValueError, RecursionError) as exc:
        raise TypeError(f"job payload is not JSON-serialisable: {exc}") from exc
    if len(text) > MAX_PAYLOAD_BYTES:
        raise ValueError(
            f"job payload is too large: {len(text):,} bytes as JSON, at most "
            f"{MAX_PAYLOAD_BYTES:,} (jsonb's limit); store big data elsewhere "
            "and pass a reference to it"
        )
    # A NUL is the escape \u0000 after an even run of backslashes; after an
    # odd one the backslash is escaped and "u0000" is just text.
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise ValueError("job payload must not contain NUL characters (jsonb cannot store them)")
    if "\\ud" in text:  # a character beyond U+FFFF, or a lone surrogate
        try:
            _JSON_UNESCAPED.encode(payload).encode()
        except UnicodeEncodeError:
            raise ValueError(
                "job payload must be valid Unicode text (it has a lone surrogate, "
                "which jsonb cannot store)"
            ) from None
    return text
