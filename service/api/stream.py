"""One generation from a dialect's point of view, and the one skeleton every dialect answers through.

The first event is awaited before an HTTP response starts, so anything that fails early (an unknown model, a
full queue, a bad template, a timeout before the first token) is an ordinary error response in the caller's
dialect. After that, errors travel inside the stream. When the client goes away, the stream is closed, which
cancels the job; the model's lease is released once the runner has let go of it.
"""

from __future__ import annotations

from typing import AsyncIterator, Callable, Protocol

import anyio
from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..engine.events import Done, Event, Result
from ..engine.request import GenerationRequest
from ..errors import ServiceError
from ..manager import Lease, ModelManager
from .images import load_images


class Generation:
    def __init__(self, lease: Lease, events: AsyncIterator[Event], first: Event):
        self._lease, self._events, self._first = lease, events, first
        self._closed = False

    @property
    def model(self) -> str:
        return self._lease.served.name

    @property
    def load_seconds(self) -> float:
        """The load this request waited for (0 when the model was loaded already)."""
        return self._lease.served.load_seconds if self._lease.waited_for_load else 0.0

    @classmethod
    async def start(cls, manager: ModelManager, req: GenerationRequest) -> Generation:
        target = manager.resolve(req.model)
        job = await load_images(manager.job(req, target), manager.settings.max_image_bytes)
        lease = await manager.lease(req.model, req.keep_alive, target=target)
        events = None
        try:
            events = lease.served.runner.submit(job.start())
            first = await events.__anext__()
        except BaseException:
            with anyio.CancelScope(shield=True):
                if events is not None:
                    await events.aclose()
            await lease.release()
            raise
        return cls(lease, events, first)

    async def events(self) -> AsyncIterator[Event]:
        usage = self._lease.served.usage
        try:
            yield self._observe(self._first, usage)
            async for event in self._events:
                yield self._observe(event, usage)
        except ServiceError:
            usage.errors += 1
            raise
        finally:
            await self.close()

    @staticmethod
    def _observe(event: Event, usage) -> Event:
        if isinstance(event, Done):  # once per request: what /api/stats and /metrics report
            u, t = event.usage, event.timings
            usage.finished(u.prompt_tokens, u.completion_tokens, u.cached_tokens, t.queued + t.prompt, t.decode,
                           t.queued)
        return event

    async def result(self) -> Result:
        result = Result()
        async for event in self.events():
            result.add(event)
        return result

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):  # finish cleaning up even when the client's task is cancelled
            await self._events.aclose()
        await self._lease.release()


class View(Protocol):
    """A dialect's rendering of one generation."""

    media_type: str

    def complete(self, result: Result) -> dict: ...

    def stream(self, events: AsyncIterator[Event]) -> AsyncIterator[str]: ...

    def stream_error(self, error: ServiceError) -> str: ...


async def respond(request: Request, req: GenerationRequest, view_for: Callable[[Generation], View]) -> Response:
    gen = await Generation.start(request.app.state.manager, req)
    view = view_for(gen)
    if not req.stream:
        result = await unless_disconnected(request, gen.result())
        return JSONResponse(view.complete(result)) if result is not None else Response(status_code=499)

    async def body():
        try:
            async for chunk in view.stream(gen.events()):
                yield chunk
        except ServiceError as exc:  # after the 200: the error travels in the stream
            yield view.stream_error(exc)
        finally:
            await gen.close()

    return StreamingResponse(coalesced(body()), media_type=view.media_type,
                             headers={"cache-control": "no-cache", "x-accel-buffering": "no"})


async def unless_disconnected(request: Request, work):
    """`work`'s result, or None once the client has gone: a non-streaming client that disconnects stops its job
    (and frees its place in the batch) at the next step, as a streaming one does."""
    outcome, failed = [], []
    async with anyio.create_task_group() as group:
        async def run():
            try:
                outcome.append(await work)
            except Exception as exc:  # raised below as itself, not inside the task group's ExceptionGroup
                failed.append(exc)
            group.cancel_scope.cancel()

        async def watch():
            while (await request.receive())["type"] != "http.disconnect":
                pass
            group.cancel_scope.cancel()

        group.start_soon(run)
        group.start_soon(watch)
    if failed:
        raise failed[0]
    return outcome[0] if outcome else None


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
