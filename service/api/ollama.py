"""Ollama dialect: /, /api/version, /api/tags, /api/show, /api/ps, /api/chat, /api/generate."""

from __future__ import annotations

import asyncio
import json
import math
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict

from .. import __version__
from ..catalog import Entry, UncatalogedRepo
from ..catalog.resolve import ResolveError
from ..engine.types import Completion, GenerationRequest, Message, Sampling
from ..errors import BadRequest, ModelNotFound, ServiceError
from ..locate import local_folder, locate
from .common import keep_alive, parse_body, stop_list
from .listing import digest_of, mtime_iso
from .show import render_show, summary_details

router = APIRouter()
DONE_REASON = {"stop": "stop", "stop_sequence": "stop", "length": "length", "cancelled": "stop"}
_OPTION_TYPES = {"temperature": float, "top_p": float, "top_k": int, "min_p": float, "seed": int,
                 "num_predict": int, "repeat_penalty": float}


class _Base(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = ""
    name: str | None = None  # legacy alias of `model`
    stream: bool = True
    keep_alive: int | float | str | None = None
    options: dict[str, Any] | None = None
    format: Any = None


class ChatRequest(_Base):
    messages: list[dict] = []


class GenerateRequest(_Base):
    prompt: str = ""
    system: str | None = None
    raw: bool = False


def _created_at() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _options(options: dict | None) -> tuple[Sampling, int | None, list[str]]:
    options = options or {}
    for key, kind in _OPTION_TYPES.items():
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise BadRequest(f'option "{key}" must be of type {"integer" if kind is int else "number"}')
    ints = {k: int(options[k]) for k in ("top_k", "seed", "num_predict") if options.get(k) is not None}
    num_predict = ints.get("num_predict")
    sampling = Sampling(options.get("temperature"), options.get("top_p"), ints.get("top_k"), options.get("min_p"),
                        options.get("repeat_penalty"), ints.get("seed"))
    return sampling, (None if num_predict is None or num_predict < 0 else max(num_predict, 1)), \
        stop_list(options.get("stop"), "options.stop")


def _metrics(c: Completion, load_ns: int) -> dict:
    return {"total_duration": int(c.total_seconds * 1e9) + load_ns, "load_duration": load_ns,
            "prompt_eval_count": c.prompt_tokens, "prompt_eval_duration": int(c.prompt_seconds * 1e9),
            "eval_count": c.completion_tokens, "eval_duration": int(c.decode_seconds * 1e9)}


async def _load_or_unload(request: Request, body: _Base, name: str):
    """Empty prompt/messages: load the model, or with keep_alive 0 unload it (Ollama's explicit controls)."""
    manager = request.app.state.manager
    seconds = keep_alive(body.keep_alive)
    if seconds == 0:
        manager.resolve(name)  # unknown names are still a 404
        await manager.unload(name)
        reason = "unload"
    else:
        await manager.load(name, seconds)
        reason = "load"
    return {"model": name, "created_at": _created_at(), "response": "", "done": True, "done_reason": reason}


async def _generate(request: Request, body: _Base, req: GenerationRequest, chat: bool):
    from .stream import Generation

    manager = request.app.state.manager
    loaded_before = manager.is_loaded(req.model)
    gen = await Generation.start(manager, req)
    load_ns = 0 if loaded_before else int(gen.served.load_seconds * 1e9)
    name = body.model or body.name

    def line(text: str, done: bool = False, extra: dict | None = None) -> dict:
        out: dict = {"model": name, "created_at": _created_at()}
        if chat:
            out["message"] = {"role": "assistant", "content": text}
        else:
            out["response"] = text
        out["done"] = done
        return {**out, **(extra or {})}

    if not body.stream:
        text = await gen.text()
        c = gen.completion
        return JSONResponse(line(text, True, {"done_reason": DONE_REASON[c.finish_reason], **_metrics(c, load_ns)}))

    async def lines():
        try:
            async for piece in gen.deltas():
                yield json.dumps(line(piece)) + "\n"
            c = gen.completion
            yield json.dumps(line("", True, {"done_reason": DONE_REASON[c.finish_reason],
                                             **_metrics(c, load_ns)})) + "\n"
        except ServiceError as exc:
            yield json.dumps({"error": exc.message}) + "\n"

    return StreamingResponse(lines(), media_type="application/x-ndjson")


@router.post("/api/chat")
async def chat(request: Request):
    body = await parse_body(request, ChatRequest)
    name = body.model or body.name or ""
    if not body.messages:
        return JSONResponse(await _load_or_unload(request, body, name) | {"message": {"role": "assistant",
                                                                                       "content": ""}})
    messages = []
    for i, m in enumerate(body.messages):
        role = str(m.get("role", "")).lower()
        if role not in ("system", "user", "assistant", "tool"):
            raise BadRequest(f"messages[{i}].role must be system, user, assistant or tool")
        if m.get("images"):
            raise BadRequest("images need a vision model, which this version of MLX Service does not serve yet")
        content = m.get("content", "")
        if not isinstance(content, str):
            raise BadRequest(f"messages[{i}].content must be a string")
        messages.append(Message(role, content))
    sampling, limit, stops = _options(body.options)
    req = GenerationRequest(model=name, messages=messages, max_tokens=limit, stop=stops, sampling=sampling,
                            keep_alive=keep_alive(body.keep_alive),
                            ignore_eos=bool((body.options or {}).get("ignore_eos")))
    return await _generate(request, body, req, chat=True)


@router.post("/api/generate")
async def generate(request: Request):
    body = await parse_body(request, GenerateRequest)
    name = body.model or body.name or ""
    if not body.prompt:
        return JSONResponse(await _load_or_unload(request, body, name))
    if body.model_extra and body.model_extra.get("images"):
        raise BadRequest("images need a vision model, which this version of MLX Service does not serve yet")
    sampling, limit, stops = _options(body.options)
    common = dict(model=name, max_tokens=limit, stop=stops, sampling=sampling, keep_alive=keep_alive(body.keep_alive),
                  ignore_eos=bool((body.options or {}).get("ignore_eos")))
    if body.raw:
        req = GenerationRequest(prompt=body.prompt, **common)
    else:
        messages = ([Message("system", body.system)] if body.system else []) + [Message("user", body.prompt)]
        req = GenerationRequest(messages=messages, **common)
    return await _generate(request, body, req, chat=False)


@router.api_route("/", methods=["GET", "HEAD"])
async def root():
    return PlainTextResponse("Ollama is running")


@router.api_route("/api/version", methods=["GET", "HEAD"])
async def version():
    return {"version": __version__}


@router.api_route("/api/tags", methods=["GET", "HEAD"])
async def tags(request: Request):
    from ..hub import store

    manager = request.app.state.manager
    found = await asyncio.to_thread(store.downloaded, manager.settings, manager.catalog)
    return {"models": [{"name": m.name, "model": m.name, "modified_at": mtime_iso(int(m.modified)), "size": m.size,
                        "digest": m.revision or digest_of(m.path), "details": summary_details(m.entry)}
                       for m in found]}


class ShowRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = ""
    name: str | None = None
    verbose: bool = False


@router.post("/api/show")
async def show(request: Request):
    body = await parse_body(request, ShowRequest)
    name = (body.model or body.name or "").strip()
    manager = request.app.state.manager
    models_dir = manager.settings.models_dir
    try:
        found = manager.catalog.resolve(name)
    except ResolveError as exc:
        folder = local_folder(models_dir, name)
        if folder is None:
            raise ModelNotFound(f"model '{name}' not found: {exc}") from None
        return render_show(manager.catalog, None, name, folder)
    if isinstance(found, UncatalogedRepo):
        located = locate(models_dir, found)
        if located.path is None:
            raise ModelNotFound(f"model '{name}' not found (not in the catalog and not downloaded)")
        return render_show(manager.catalog, None, found.repo, located.path)
    entry: Entry = found
    return render_show(manager.catalog, entry, entry.tag, locate(models_dir, entry).path)


@router.get("/api/ps")
async def ps(request: Request):
    manager = request.app.state.manager
    out = []
    now = time.monotonic()
    for served in sorted(manager.models.values(), key=lambda s: s.expires_at, reverse=True):
        remaining = served.expires_at - now if served.active == 0 else served.keep_alive
        remaining = min(remaining, 292 * 365 * 86400) if math.isinf(remaining) else max(remaining, 0)
        expires = datetime.now(timezone.utc).astimezone() + timedelta(seconds=remaining)
        size = served.handle.active_bytes if served.handle else 0
        out.append({"name": served.name, "model": served.name, "size": size, "size_vram": size,
                    "digest": "", "details": summary_details(served.target.entry),
                    "expires_at": expires.isoformat(), "context_length": served.target.context_length})
    return {"models": out}


@router.head("/api/ps", include_in_schema=False)
async def ps_head():
    return Response()
