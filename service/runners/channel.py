"""Events of one job from a runner's thread to the event loop.

After the first item, items are handed out at most every `interval` seconds (one display frame): a fast model
then sends a few tokens per chunk instead of one, which no reader can see and which saves the encoding, system
calls and thread wake-ups that would otherwise compete with decoding for the CPU. The runner thread wakes the
loop only when the loop is actually waiting, never during its pause.

The first text can get the GIL to itself: with `hold`, the runner thread waits (at most `handoff` seconds) until
the event loop has sent it and asks for more. Otherwise the loop's work for the response head and the first
chunk would be interleaved, switch interval by switch interval, with building the next step's graph. Runners
hold only when the job decodes alone: in a batch, the others would pay for it.
"""

from __future__ import annotations

import asyncio
import threading

from ..engine.events import Done, Event, TextDelta


class Channel:
    interval = 1 / 60
    handoff = 0.01

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._last = 0.0
        self._lock = threading.Lock()
        self._items: list[Event] = []
        self._error: BaseException | None = None
        self._waiting = False  # the loop is parked on `_ready` and must be woken
        self._ready = asyncio.Event()
        self._first_sent = threading.Event()
        self._gets = 0  # event loop only
        self.finished = False  # a Done or an error was put: the runner has let go of the job

    # ---- runner thread ----------------------------------------------------------------------------------
    def put(self, event: Event, hold: bool = False) -> None:
        self._deliver(event, None)
        if hold:
            self._first_sent.wait(self.handoff)

    def fail(self, error: BaseException) -> None:
        self._deliver(None, error)

    def _deliver(self, event: Event | None, error: BaseException | None) -> None:
        with self._lock:
            if event is not None:
                self._items.append(event)
            if error is not None or isinstance(event, Done):
                self._error, self.finished = error, True
            wake, self._waiting = self._waiting, False
        if wake:
            self._loop.call_soon_threadsafe(self._ready.set)

    # ---- event loop -------------------------------------------------------------------------------------
    async def get(self) -> list[Event]:
        """The events gathered since the last call (adjacent text joined); [] once everything was read.
        Raises the runner's error after the events that came before it."""
        self._gets += 1
        if self._gets == 2:  # the first item has been sent: let a holding runner go on
            self._first_sent.set()
        wait = self._last + self.interval - self._loop.time()
        if self._last and wait > 0 and not self.finished:
            await asyncio.sleep(wait)
        self._last = self._loop.time()
        while True:
            with self._lock:
                items, self._items = self._items, []
                finished, error = self.finished, self._error
                if finished:
                    self._error = None
                elif not items:
                    self._ready.clear()
                    self._waiting = True
            if items:
                if error is not None:  # first the events that came before it
                    with self._lock:
                        self._error = error
                return _joined(items)
            if error is not None:
                raise error
            if finished:
                return []
            await self._ready.wait()

    async def wait_finished(self) -> None:
        self._first_sent.set()
        while not self.finished:
            self._ready.clear()
            with self._lock:
                if self.finished:
                    return
                self._waiting = True
            await self._ready.wait()


def _joined(items: list[Event]) -> list[Event]:
    out: list[Event] = []
    for item in items:
        if out and isinstance(item, TextDelta) and isinstance(out[-1], TextDelta):
            out[-1] = TextDelta(out[-1].text + item.text)
        else:
            out.append(item)
    return out
