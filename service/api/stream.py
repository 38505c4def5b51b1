"""Bridge one generation from the MLX thread to the event loop as an async stream of text deltas.

The first delta is awaited before an HTTP response starts, so anything that fails early (a bad template, an
empty prompt, a timeout before the first token) is a normal error response in the caller's dialect. When the
client goes away, the generation is told to stop and the model's slot is released once it has.
"""

from __future__ import annotations

import asyncio
import threading

import anyio

from ..engine.types import Completion, GenerationRequest
from ..manager import ModelManager, Served

_DONE = object()


class Generation:
    def __init__(self, served: Served, lease, task: asyncio.Task, queue: asyncio.Queue, cancel: threading.Event):
        self.served, self._lease, self._task, self._queue, self._cancel = served, lease, task, queue, cancel
        self._first: object | None = None
        self.completion: Completion | None = None

    @classmethod
    async def start(cls, manager: ModelManager, req: GenerationRequest) -> Generation:
        lease = manager.use(req.model, req.keep_alive)
        served = await lease.__aenter__()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        cancel = threading.Event()
        task = asyncio.ensure_future(manager.generate(
            served, req, lambda text: loop.call_soon_threadsafe(queue.put_nowait, text), cancel))
        task.add_done_callback(lambda _: queue.put_nowait(_DONE))
        self = cls(served, lease, task, queue, cancel)
        try:
            self._first = await queue.get()
            if self._first is _DONE:
                self.completion = task.result()  # raises the generation's error before any byte is sent
        except BaseException:
            await self.close()
            raise
        return self

    async def deltas(self):
        """Text pieces as they are generated; `completion` is set when this is exhausted."""
        try:
            item = self._first
            while item is not _DONE:
                yield item
                item = await self._queue.get()
            self.completion = self._task.result()
        finally:
            await self.close()

    async def text(self) -> str:
        return "".join([piece async for piece in self.deltas()])

    async def close(self) -> None:
        if self._lease is None:
            return
        lease, self._lease = self._lease, None
        with anyio.CancelScope(shield=True):  # finish cleaning up even when the client's task is cancelled
            if not self._task.done():
                self._cancel.set()
            try:
                await self._task
            except BaseException:
                pass
            await lease.__aexit__(None, None, None)
