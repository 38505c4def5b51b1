"""One thread that owns a model: every MLX call of a serial runner runs on it, in order.

MLX streams belong to the thread that made them, and these models (embedding, speech, vision) run one job at a
time, so one thread per model is both the safe and the simple choice; the event loop only awaits results."""

from __future__ import annotations

import asyncio
import gc
import queue
import threading
from typing import Any, Callable


class Worker:
    def __init__(self, name: str):
        self._jobs: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self.busy = 0  # jobs submitted and not finished

    def _main(self) -> None:
        import mlx.core as mx

        stream = mx.new_stream(mx.default_device())
        with mx.stream(stream):
            while True:
                item = self._jobs.get()
                if item is None:
                    break
                fn, future, loop = item
                try:
                    result = fn()
                except BaseException as exc:  # the caller gets it, the thread goes on
                    loop.call_soon_threadsafe(settle, future, None, exc)
                else:
                    loop.call_soon_threadsafe(settle, future, result, None)
        gc.collect()
        mx.clear_cache()

    async def run(self, fn: Callable[[], Any]) -> Any:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.busy += 1
        try:
            self._jobs.put((fn, future, loop))
            return await asyncio.shield(future)  # a cancelled request still lets the thread finish its call
        finally:
            self.busy -= 1

    async def stop(self, release: Callable[[], None]) -> None:
        """After the jobs queued so far: `release` the model on the thread, then end it."""
        await self.run(release)
        self._jobs.put(None)
        await asyncio.to_thread(self._thread.join)


def settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    """Resolve `future` (on its event loop's thread) unless it already is."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class SerialRunner:
    """A runner that takes one request at a time on a `Worker` of its own (vision, embedding, speech models).
    Subclasses load their model in `_load` and drop it in `_release`, both on the worker thread."""

    capacity = 1

    def __init__(self, spec):
        self.name, self.spec = spec.name, spec
        self.memory_bytes = 0
        self.worker = Worker(f"runner {spec.name}")
        self._counts: dict[str, int] = {"finished": 0}

    @classmethod
    async def open(cls, spec):
        """Load `spec` on the runner's thread; raises what loading raised, with the thread ended."""
        runner = cls(spec)
        try:
            await runner.worker.run(runner._load)
        except BaseException:
            await runner.close()
            raise
        return runner

    def _load(self) -> None:
        raise NotImplementedError

    def _release(self) -> None:
        raise NotImplementedError

    def stats(self) -> dict[str, int]:
        return {"running": min(self.worker.busy, 1), "waiting": max(self.worker.busy - 1, 0), **self._counts}

    async def close(self) -> None:
        await self.worker.stop(self._release)
