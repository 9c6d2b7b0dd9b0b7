"""The worker, as small components: see `pgqueue.aio.worker.crew` for who owns what."""

from .worker import AsyncWorker

__all__ = ["AsyncWorker"]
