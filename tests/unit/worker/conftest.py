"""The worker's components against a fake queue: no database, asyncio and trio."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's retry backoff, a hundred times shorter: the same doubling, in milliseconds."""
    from datetime import timedelta

    from pgqueue.aio.worker import completer, fetcher, notifier
    from pgqueue.core.backoff import Backoff

    quick = Backoff(base=timedelta(milliseconds=1), cap=timedelta(milliseconds=100), jitter=0.5)
    for module in (completer, fetcher, notifier):
        monkeypatch.setattr(module, "RETRY_BACKOFF", quick)
