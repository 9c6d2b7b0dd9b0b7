"""The dashboard's input: the job browser's filters and job ids, validated
(`BadFilter`, a clear message, for anything else; nothing is run)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from .jobs import (
    MAX_NAME_LENGTH,
    JobStatus,
    validate_job_id,
    validate_kind,
    validate_queue,
    validate_status,
)
from .jsontext import load_json

__all__ = [
    "MAX_FILTER_CHARS",
    "MAX_FILTER_DEPTH",
    "MAX_JOB_ID",
    "BadFilter",
    "JobFilter",
    "check_job_id",
    "parse_id",
    "parse_ids",
]

# The largest id a bigint holds: ids are 1 to this.
MAX_JOB_ID: Final = 2**63 - 1
# A payload filter: at most this long and this deep.
MAX_FILTER_CHARS: Final = 4096
MAX_FILTER_DEPTH: Final = 32


class BadFilter(ValueError):
    """A filter of the job browser that cannot be used (a clear message, nothing run)."""


@dataclass(frozen=True, slots=True)
class JobFilter:
    """The job browser's filters (all optional), validated.

    >>> JobFilter.parse({"status": "dead", "payload": '{"order": 7}'}).payload
    '{"order": 7}'
    """

    status: JobStatus | None = None
    queue: str | None = None
    kind: str | None = None
    unique_key: str | None = None
    payload: str | None = None  # JSON text: jobs whose payload contains it (``@>``)

    @classmethod
    def parse(cls, values: Mapping[str, str]) -> JobFilter:
        """Filters from a query string's values (empty means unset); `BadFilter` if one is wrong."""

        def given(name: str) -> str | None:
            value = values.get(name, "").strip()
            return value or None

        try:
            status = given("status")
            queue = given("queue")
            kind = given("kind")
            unique_key = given("unique_key")
            payload = given("payload")
            if unique_key is not None and (
                len(unique_key) > MAX_NAME_LENGTH or "\x00" in unique_key
            ):
                raise ValueError(f"unique key must be at most {MAX_NAME_LENGTH} characters")
            if payload is not None:
                if len(payload) > MAX_FILTER_CHARS:
                    raise ValueError(f"payload filter is longer than {MAX_FILTER_CHARS} characters")
                doc = load_json(payload, "payload filter", max_depth=MAX_FILTER_DEPTH)
                if "\x00" in payload or "\\u0000" in payload:
                    raise ValueError("payload filter holds a NUL character")
                payload = json.dumps(doc)
            return cls(
                status=None if status is None else validate_status(status),
                queue=None if queue is None else validate_queue(queue),
                kind=None if kind is None else validate_kind(kind),
                unique_key=unique_key,
                payload=payload,
            )
        except (TypeError, ValueError) as exc:
            raise BadFilter(str(exc)) from None

    def as_query(self) -> dict[str, str]:
        """The filters set, as query string values."""
        out = {
            "status": self.status.value if self.status else None,
            "queue": self.queue,
            "kind": self.kind,
            "unique_key": self.unique_key,
            "payload": self.payload,
        }
        return {k: v for k, v in out.items() if v is not None}


def check_job_id(value: object, what: str = "job id") -> int:
    """A job id: an int from 1 to `MAX_JOB_ID` (`BadFilter` otherwise)."""
    try:
        job_id = validate_job_id(value, what)
    except TypeError as exc:
        raise BadFilter(str(exc)) from None
    if not 1 <= job_id <= MAX_JOB_ID:
        raise BadFilter(f"{what} must be a job id (1 to {MAX_JOB_ID}), not {job_id}")
    return job_id


def parse_id(text: str, what: str = "id") -> int:
    """A job id from text: ASCII digits only (not ``²``), within a bigint; `BadFilter` if not."""
    if not (text.isascii() and text.isdigit() and len(text) <= len(str(MAX_JOB_ID))):
        raise BadFilter(f"{what} must be a job id (1 to {MAX_JOB_ID}), not {text[:40]!r}")
    return check_job_id(int(text), what)


def parse_ids(values: Sequence[str]) -> list[int]:
    """Job ids from form values; `BadFilter` for anything but ids from 1 to `MAX_JOB_ID`."""
    return [parse_id(value) for value in values]
