"""Bridge one generation from the MLX thread to the event loop as an async stream of text deltas.

The first delta is awaited before an HTTP response starts, so anything that fails early (a bad template, an
empty prompt, a timeout before the first token) is a normal error response in the caller's dialect. Pieces
that arrive while the event loop is busy are sent together, and the loop is woken once per batch rather than
once per token, which keeps the serving overhead small for fast models. When the client goes away, the
generation is told to stop and the model's slot is released once it has.
"""

from __future__ import annotations

import asyncio
import threading

import anyio

from ..engine.types import Completion, GenerationRequest
from ..manager import ModelManager, Served


class _Pipe:
    """Text pieces from the MLX thread to the event loop.

    After the first piece, pieces are handed out at most every `interval` seconds (one display frame): a fast
    model then sends a few tokens per chunk instead of one, which no reader can see and which saves the
    encoding, system calls and thread wake-ups that would otherwise compete with decoding for the CPU. The MLX
    thread wakes the loop only when the loop is actually waiting for text, never during its pause.

    The first piece gets the GIL to itself: the MLX thread waits (at most `handoff` seconds) until the event
    loop has sent it and asks for more. Otherwise the loop's work for the response head and the first chunk
    would be interleaved, switch interval by switch interval, with building the next tokens' graphs, and the
    time to first token would grow by a millisecond or two for a gain of a fraction of one token.
    """

    interval = 1 / 60
    handoff = 0.01

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._last = 0.0
        self._lock = threading.Lock()
        self._pieces: list[str] = []
        self._waiting = False  # the loop is parked on `_ready` and must be woken for new text
        self._ready = asyncio.Event()
        self._first_sent = threading.Event()
        self._put_any = False  # MLX thread only
        self._gets = 0  # event loop only
        self.closed = False

    def put(self, text: str) -> None:  # MLX thread
        with self._lock:
            self._pieces.append(text)
            wake, self._waiting = self._waiting, False
        if wake:
            self._loop.call_soon_threadsafe(self._ready.set)
        if not self._put_any:
            self._put_any = True
            self._first_sent.wait(self.handoff)

    def close(self) -> None:  # event loop, once the generation has finished
        self.closed = True
        self._first_sent.set()
        self._ready.set()

    async def get(self) -> str | None:
        """The text gathered since the last call; None once the generation is over and everything was read."""
        self._gets += 1
        if self._gets == 2:  # the first piece has been sent: let the MLX thread go on
            self._first_sent.set()
        wait = self._last + self.interval - self._loop.time()
        if self._last and wait > 0 and not self.closed:
            await asyncio.sleep(wait)
        self._last = self._loop.time()
        while True:
            with self._lock:
                pieces, self._pieces = self._pieces, []
                if not pieces and not self.closed:
                    self._ready.clear()
                    self._waiting = True
            if pieces:
                return "".join(pieces)
            if self.closed:
                return None
            await self._ready.wait()


class Preamble(str):
    """Stream text that has no content of its own (OpenAI's role chunk, Anthropic's `message_start`): it is
    held back and leaves in the same write as whatever the stream yields next, usually the first text."""


async def coalesced(events):
    """The dialect's stream with each run of `Preamble` items joined to the item after it."""
    held = ""
    try:
        async for item in events:
            if isinstance(item, Preamble):
                held += item
            else:
                yield held + item
                held = ""
        if held:
            yield held
    finally:
        await events.aclose()  # a client that left closes this wrapper; the dialect's cleanup must run now


class Generation:
    def __init__(self, served: Served, lease, task: asyncio.Task, pipe: _Pipe, cancel: threading.Event):
        self.served, self._lease, self._task, self._pipe, self._cancel = served, lease, task, pipe, cancel
        self._first: str | None = None
        self.completion: Completion | None = None

    @classmethod
    async def start(cls, manager: ModelManager, req: GenerationRequest) -> Generation:
        lease = manager.use(req.model, req.keep_alive)
        served = await lease.__aenter__()
        pipe = _Pipe(asyncio.get_running_loop())
        cancel = threading.Event()
        task = asyncio.ensure_future(manager.generate(served, req, pipe.put, cancel))
        task.add_done_callback(lambda _: pipe.close())
        self = cls(served, lease, task, pipe, cancel)
        try:
            self._first = await pipe.get()
            if self._first is None:
                self.completion = task.result()  # raises the generation's error before any byte is sent
        except BaseException:
            await self.close()
            raise
        return self

    async def deltas(self):
        """Text as it is generated; `completion` is set when this is exhausted."""
        try:
            piece = self._first
            while piece is not None:
                yield piece
                piece = await self._pipe.get()
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
