"""JSON text from a person (a filter, a command's argument), read with bounds.

`json.loads` takes ``NaN`` and ``1e999`` (infinity), which PostgreSQL's
``jsonb`` refuses, and meets a `RecursionError` on text nested a thousand
deep: `load_json` turns all three into a `ValueError` that says what is
wrong, before anything reaches the database.
"""

from __future__ import annotations

import json
import math
from typing import Any, NoReturn

__all__ = ["load_json"]


def load_json(text: str, what: str, *, max_depth: int) -> Any:
    """The value of ``text``; `ValueError` (naming ``what``) if it is not JSON,
    holds a non-finite number, or nests deeper than ``max_depth``.

    >>> load_json('{"a": [1, 2.5]}', "payload", max_depth=2)
    {'a': [1, 2.5]}
    >>> load_json("[[[1]]]", "payload", max_depth=2)
    Traceback (most recent call last):
    ...
    ValueError: payload nests deeper than 2 levels
    """
    if _depth(text) > max_depth:
        raise ValueError(f"{what} nests deeper than {max_depth} levels")
    try:
        return json.loads(text, parse_constant=_not_finite, parse_float=_finite)
    except ValueError as exc:
        raise ValueError(f"{what} is not valid JSON: {exc}") from None


def _depth(text: str) -> int:
    """How deep ``text``'s arrays and objects nest (brackets in strings do not count)."""
    depth = deepest = 0
    in_string = escaped = False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def _not_finite(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a number")
    return value
