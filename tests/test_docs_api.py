"""docs/index.md's API table is the code's API (no database needed).

Each method row shows the signature of `Queue`'s method as
`inspect.signature` gives it (names and defaults, without annotations), and
`AsyncQueue` has the same; every name of ``pgqueue.__all__`` is named on the
page. A parameter added, renamed or given another default fails here until
the page says so.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import pgqueue

PAGE = Path(__file__).resolve().parent.parent / "docs" / "index.md"
ROW = re.compile(r"^\| `(\w+)\((.*?)\)`(?:, `\w+\(\)`)* \|", re.M)


def shown(function: Callable[..., Any]) -> str:
    """``name(a, b=1, *, c=None)``: a signature as the page writes it."""
    parts: list[str] = []
    star = False
    for p in list(inspect.signature(function).parameters.values())[1:]:  # self
        if p.kind is p.VAR_POSITIONAL:
            parts.append(f"*{p.name}")
            star = True
            continue
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        parts.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    return f"{function.__name__}({', '.join(parts)})"


def rows() -> list[tuple[str, str]]:
    return ROW.findall(PAGE.read_text())


def test_the_page_has_a_method_table() -> None:
    assert len(rows()) >= 10


@pytest.mark.parametrize(("name", "params"), rows(), ids=lambda v: str(v)[:30])
def test_each_method_row_is_the_signature_of_both_queues(name: str, params: str) -> None:
    written = f"{name}({params})"
    assert written == shown(getattr(pgqueue.Queue, name))
    assert written == shown(getattr(pgqueue.AsyncQueue, name))


def test_every_public_name_is_on_the_page() -> None:
    text = PAGE.read_text()
    missing = [n for n in pgqueue.__all__ if f"`{n}`" not in text and f"`{n}()`" not in text]
    assert missing == []
