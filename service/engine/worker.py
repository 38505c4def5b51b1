"""The MLX thread: every MLX call (load, generate, unload) runs here, bridged to asyncio.

Why one thread: MLX streams belong to the thread that created them, and the event loop must never block on
MLX work. Jobs run one at a time in submission order.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any, Callable


class MLXWorker:
    def __init__(self, name: str = "mlx"):
        self._jobs: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, loop, future = job
            try:
                result = fn()
            except BaseException as exc:  # delivered to the awaiting coroutine
                loop.call_soon_threadsafe(_settle, future, None, exc)
            else:
                loop.call_soon_threadsafe(_settle, future, result, None)

    async def run(self, fn: Callable[[], Any]) -> Any:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._jobs.put((fn, loop, future))
        return await future

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=5)


def _settle(future: asyncio.Future, result, exc) -> None:
    if future.cancelled():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
