"""The templates' filters: times and errors as the pages write them."""

from __future__ import annotations

from datetime import datetime, timedelta

__all__ = ["ago", "clock", "summary", "when"]


def ago(value: timedelta | datetime | None, now: datetime | None = None) -> str:
    """``3m 20s`` (a timedelta, or the time since a datetime)."""
    if value is None:
        return "—"
    if isinstance(value, datetime):
        if now is None:
            return when(value)
        value = now - value
    seconds = int(value.total_seconds())
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 60:
        return f"{sign}{seconds}s"
    if seconds < 3600:
        return f"{sign}{seconds // 60}m {seconds % 60}s"
    if seconds < 86400:
        return f"{sign}{seconds // 3600}h {seconds % 3600 // 60}m"
    return f"{sign}{seconds // 86400}d {seconds % 86400 // 3600}h"


def when(value: datetime | None) -> str:
    return "—" if value is None else value.strftime("%Y-%m-%d %H:%M:%S %Z")


def clock(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%H:%M:%S")


def summary(error: str | None) -> str:
    """An error in one line: a traceback's last line (the exception), else its first."""
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[-1] if lines[0].startswith("Traceback") else lines[0]
