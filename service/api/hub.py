"""Ollama's model-store endpoints: POST /api/pull (NDJSON progress), DELETE /api/delete."""

from __future__ import annotations

import asyncio
import json
import threading

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..errors import BadRequest, NotFound, ServiceError
from ..hub import store
from .common import ModelRequest, json_body, parse_body
from .errors import OLLAMA
from .schemas import NDJSON, Cancelled, PullStatus, documented

router = APIRouter()


class PullRequest(ModelRequest):
    stream: bool = True


def _ollama_line(event: dict) -> dict:
    """Ollama's progress shape, plus the overall totals Ollama lacks."""
    line = {"status": event["status"]}
    if "digest" in event:
        line.update(digest=event["digest"], total=event["file_total"], completed=event["file_completed"])
    line.update(overall_total=event.get("total", 0), overall_completed=event.get("completed", 0))
    return line


@router.post("/api/pull", openapi_extra=json_body(PullRequest),
             responses=documented(OLLAMA, PullStatus, NDJSON))
async def pull(request: Request):
    body = await parse_body(request, PullRequest)
    name = body.model_name
    if not name:
        raise BadRequest("`model` is required")
    manager = request.app.state.manager
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()
    cancel = threading.Event()

    def progress(event: dict) -> None:
        manager.pulls[name] = {"status": event.get("status"), "completed": event.get("completed", 0),
                               "total": event.get("total", 0)}
        loop.call_soon_threadsafe(events.put_nowait, event)

    manager.pull_cancels[name] = cancel

    def work():
        manager.events.record("pull_started", name)
        try:
            path = store.pull(manager.settings, manager.catalog, name, progress, cancel)
        except ServiceError as exc:
            manager.events.record("pull_failed", name, error=exc.message)
            raise
        finally:
            manager.pulls.pop(name, None)
            if manager.pull_cancels.get(name) is cancel:
                del manager.pull_cancels[name]
        manager.events.record("pull_finished", name)
        return path

    task = asyncio.ensure_future(asyncio.to_thread(work))
    if not body.stream:
        try:
            await task
        finally:
            cancel.set()
        return JSONResponse({"status": "success"})

    async def next_event() -> dict | None:
        """The next progress event, or None once the pull has finished and every event was read."""
        if not events.empty():
            return events.get_nowait()
        get = asyncio.ensure_future(events.get())
        await asyncio.wait([get, task], return_when=asyncio.FIRST_COMPLETED)
        if get.done():
            return get.result()
        get.cancel()
        return events.get_nowait() if not events.empty() else None

    first = await next_event()
    if first is None:  # finished (or failed) before any progress: an ordinary response or error
        cancel.set()
        task.result()

    async def lines():
        try:
            event = first
            while event is not None:
                yield json.dumps(_ollama_line(event)) + "\n"
                event = await next_event()
            try:
                task.result()
            except ServiceError as exc:  # after the stream started: Ollama's final error line
                yield json.dumps({"error": exc.message}) + "\n"
        finally:
            cancel.set()  # a client that goes away cancels its pull (the partial files stay, for resume)

    return StreamingResponse(lines(), media_type="application/x-ndjson")


@router.delete("/api/pull", openapi_extra=json_body(ModelRequest), responses=documented(OLLAMA, Cancelled))
async def cancel_pull(request: Request):
    """Stop a running pull, whoever started it (the web UI's cancel button); its partial files stay, for resume."""
    body = await parse_body(request, ModelRequest)
    cancel = request.app.state.manager.pull_cancels.get(body.model_name)
    if cancel is None:
        raise NotFound(f"no pull of {body.model_name!r} is running")
    cancel.set()
    return {"cancelled": True}


@router.delete("/api/delete", openapi_extra=json_body(ModelRequest), responses=documented(OLLAMA))
async def delete(request: Request):
    body = await parse_body(request, ModelRequest)
    manager = request.app.state.manager
    name = body.model_name
    found = await asyncio.to_thread(store.find, manager.settings, manager.catalog, name)
    for served in [s for s in manager.models.values() if s.target.path == found.path]:
        await manager.unload(served.name, reason="deleted")  # its files go next: never delete under a model
    await asyncio.to_thread(store.remove, manager.settings, found.path)
    return Response(status_code=200)
