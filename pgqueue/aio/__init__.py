"""The async API: `AsyncQueue` and `AsyncWorker` on anyio (asyncio and trio)."""
