"""Ollama dialect: /, /api/version, /api/tags, /api/show, /api/ps, /api/chat, /api/generate."""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response

from .. import __version__
from ..engine.events import Done, Event, Result, TextDelta, ThinkingDelta, ToolCall
from ..engine.request import GenerationRequest, Message, ResponseFormat, Thinking
from ..errors import BadRequest, ServiceError
from . import finish
from .common import (
    ModelRequest,
    function_calls,
    function_tools,
    json_body,
    json_schema,
    keep_alive,
    number,
    parse_body,
    sampling,
    stop_list,
)
from .embed import embed, embedding_job
from .errors import OLLAMA
from .images import from_base64
from .listing import digest_of, mtime_iso
from .schemas import (
    NDJSON,
    LocalModels,
    OllamaChat,
    OllamaEmbed,
    OllamaEmbedding,
    OllamaGenerate,
    Show,
    Version,
    documented,
)
from .show import render_show, summary_details
from .stream import respond

router = APIRouter()
_OPTIONS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p", "seed": "seed",
            "repeat_penalty": "repetition_penalty"}


class _Base(ModelRequest):
    stream: bool = True
    keep_alive: int | float | str | None = None
    options: dict[str, Any] | None = None
    format: Any = None
    think: bool | str | None = None


class ChatRequest(_Base):
    messages: list[dict] = []
    tools: list | None = None


class GenerateRequest(_Base):
    prompt: str = ""
    system: str | None = None
    raw: bool = False


def _created_at() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _request(body: _Base, **what) -> GenerationRequest:
    """Ollama's `options`: sampling under its own names, `num_predict` (negative: no limit), `stop`."""
    options = body.options or {}
    given = {ours: options.get(theirs) for theirs, ours in _OPTIONS.items()}
    predict = options.get("num_predict")
    limit = None if predict is None else number(predict, "options.num_predict", -(2**31), 2**31, integer=True)
    return GenerationRequest(
        model=body.model_name, sampling=sampling("options.", **given),
        max_tokens=None if limit is None or limit < 0 else max(limit, 1),
        stop=stop_list(options.get("stop"), "options.stop"), stream=body.stream,
        keep_alive=keep_alive(body.keep_alive), ignore_eos=bool(options.get("ignore_eos")),
        response_format=_format(body.format), thinking=_think(body.think), **what)


def _format(value: Any) -> ResponseFormat | None:
    if value in (None, ""):
        return None
    if value == "json":
        return ResponseFormat()
    if isinstance(value, dict):
        return json_schema(value, "format")
    raise BadRequest(f'invalid format: {json.dumps(value)}; expected "json" or a valid JSON Schema object')


_LEVELS = {"low": "low", "medium": "medium", "high": "high", "max": "high"}


def _think(value: Any) -> Thinking:
    if value is None or isinstance(value, bool):
        return Thinking(enabled=value)
    if value in _LEVELS:
        return Thinking(enabled=True, effort=_LEVELS[value])
    raise BadRequest(f'invalid think value: {json.dumps(value)} (must be "high", "medium", "low", "max", true, '
                     "or false)")


def chat_request(body: ChatRequest) -> GenerationRequest:
    messages = []
    for i, m in enumerate(body.messages):
        role = str(m.get("role", "")).lower()
        if role not in ("system", "user", "assistant", "tool"):
            raise BadRequest(f"messages[{i}].role must be system, user, assistant or tool")
        content = m.get("content", "") or ""
        if not isinstance(content, str):
            raise BadRequest(f"messages[{i}].content must be a string")
        thinking = m.get("thinking")
        tool_name = m.get("tool_name") or m.get("name")
        messages.append(Message(role, content, tool_calls=function_calls(m.get("tool_calls"),
                                                                          f"messages[{i}].tool_calls"),
                                tool_call_id=m.get("tool_call_id") if role == "tool" else None,
                                name=tool_name if role == "tool" and isinstance(tool_name, str) else None,
                                thinking=thinking if isinstance(thinking, str) else None,
                                images=_images(m.get("images"), f"messages[{i}].images")))
    return _request(body, messages=messages, tools=function_tools(body.tools))


def generate_request(body: GenerateRequest) -> GenerationRequest:
    images = _images((body.model_extra or {}).get("images"), "images")
    if body.raw:
        if images:
            raise BadRequest("raw mode does not take images: send them with a templated prompt")
        return _request(body, prompt=body.prompt)
    messages = ([Message("system", body.system)] if body.system else []) + [Message("user", body.prompt,
                                                                                    images=images)]
    return _request(body, messages=messages)


def _images(value: Any, where: str) -> tuple:
    """Ollama's `images`: base64 strings."""
    if not value:
        return ()
    if not isinstance(value, list):
        raise BadRequest(f"{where} must be a list of base64 strings")
    return tuple(from_base64(v, f"{where}[{i}]") for i, v in enumerate(value))


def _call(call: ToolCall, index: int) -> dict:
    """Ollama's tool call: the arguments as an object."""
    try:
        arguments = json.loads(call.arguments)
    except ValueError:
        arguments = {}
    return {"id": call.id, "function": {"index": index, "name": call.name, "arguments": arguments}}


def _metrics(done: Done, load_seconds: float) -> dict:
    t, load_ns = done.timings, int(load_seconds * 1e9)
    return {"done_reason": finish.ollama(done.finish_reason), "total_duration": int(t.total * 1e9) + load_ns,
            "load_duration": load_ns, "prompt_eval_count": done.usage.prompt_tokens,
            "prompt_eval_duration": int(t.prompt * 1e9), "eval_count": done.usage.completion_tokens,
            "eval_duration": int(t.decode * 1e9)}


@dataclass
class OllamaView:
    """`/api/chat` (`chat`) or `/api/generate`, as one JSON object or NDJSON lines."""

    name: str  # as the request spelled it: Ollama echoes the name it was given
    chat: bool
    load_seconds: float = 0.0
    media_type = "application/x-ndjson"

    def _line(self, text: str, done: Done | None = None, thinking: str = "", calls: list[ToolCall] = (),
              first_call: int = 0) -> dict:
        out: dict = {"model": self.name, "created_at": _created_at()}
        if self.chat:
            out["message"] = {"role": "assistant", "content": text}
            if thinking:
                out["message"]["thinking"] = thinking
            if calls:
                out["message"]["tool_calls"] = [_call(c, first_call + i) for i, c in enumerate(calls)]
        else:
            out["response"] = text
            if thinking:
                out["thinking"] = thinking
        out["done"] = done is not None
        return out | (_metrics(done, self.load_seconds) if done else {})

    def complete(self, result: Result) -> dict:
        return self._line(result.text, result.done, result.thinking, result.tool_calls)

    async def stream(self, events: AsyncIterator[Event]):
        calls = 0
        async for event in events:
            if isinstance(event, TextDelta):
                yield json.dumps(self._line(event.text)) + "\n"
            elif isinstance(event, ThinkingDelta):
                yield json.dumps(self._line("", thinking=event.text)) + "\n"
            elif isinstance(event, ToolCall):
                yield json.dumps(self._line("", calls=[event], first_call=calls)) + "\n"
                calls += 1
            elif isinstance(event, Done):
                yield json.dumps(self._line("", event)) + "\n"

    def stream_error(self, error: ServiceError) -> str:
        return json.dumps({"error": error.message}) + "\n"


async def _load_or_unload(request: Request, body: _Base) -> dict:
    """Empty prompt/messages: load the model, or with keep_alive 0 unload it (Ollama's explicit controls)."""
    manager = request.app.state.manager
    name = body.model_name
    seconds = keep_alive(body.keep_alive)
    if seconds == 0:
        manager.resolve(name)  # unknown names are still a 404
        await manager.unload(name)
        reason = "unload"
    else:
        await manager.load(name, seconds)
        reason = "load"
    return {"model": name, "created_at": _created_at(), "response": "", "done": True, "done_reason": reason}


def _view(body: _Base, chat: bool):
    return lambda gen: OllamaView(body.model_name, chat, gen.load_seconds)


@router.post("/api/chat", openapi_extra=json_body(ChatRequest),
             responses=documented(OLLAMA, OllamaChat, NDJSON))
async def chat(request: Request):
    body = await parse_body(request, ChatRequest)
    if not body.messages:
        return JSONResponse(await _load_or_unload(request, body) | {"message": {"role": "assistant",
                                                                                 "content": ""}})
    return await respond(request, chat_request(body), _view(body, chat=True))


@router.post("/api/generate", openapi_extra=json_body(GenerateRequest),
             responses=documented(OLLAMA, OllamaGenerate, NDJSON))
async def generate(request: Request):
    body = await parse_body(request, GenerateRequest)
    if not body.prompt:
        return JSONResponse(await _load_or_unload(request, body))
    return await respond(request, generate_request(body), _view(body, chat=False))


class EmbedRequest(_Base):
    input: Any = None
    truncate: bool = True
    dimensions: Any = None


class LegacyEmbeddingsRequest(_Base):
    prompt: Any = None


@router.post("/api/embed", openapi_extra=json_body(EmbedRequest), responses=documented(OLLAMA, OllamaEmbed))
async def embed_route(request: Request):
    body = await parse_body(request, EmbedRequest)
    done = await embed(request, body.model_name, embedding_job(body.input, truncate=body.truncate,
                                                               dimensions=body.dimensions),
                       keep_alive(body.keep_alive))
    seconds = done.result.seconds + done.load_seconds
    return JSONResponse({"model": body.model_name, "embeddings": done.result.vectors,  # as is: no per-float pass
                         "total_duration": int(seconds * 1e9), "load_duration": int(done.load_seconds * 1e9),
                         "prompt_eval_count": done.result.prompt_tokens})


@router.post("/api/embeddings", openapi_extra=json_body(LegacyEmbeddingsRequest),
             responses=documented(OLLAMA, OllamaEmbedding))
async def embeddings_legacy(request: Request):
    """Ollama's older endpoint: one `prompt`, one `embedding`."""
    body = await parse_body(request, LegacyEmbeddingsRequest)
    if not isinstance(body.prompt, str):
        raise BadRequest("prompt must be a string")
    done = await embed(request, body.model_name, embedding_job(body.prompt, where="prompt"),
                       keep_alive(body.keep_alive))
    return JSONResponse({"embedding": done.result.vectors[0]})


@router.get("/", responses={**documented(OLLAMA, also=("text/plain",)),
                            307: {"description": "A browser asking for a page is sent to the web UI, /ui/"}})
@router.head("/", include_in_schema=False)
async def root(request: Request):
    """Ollama's liveness answer, except for a browser asking for a page: it gets the web UI."""
    if "text/html" in request.headers.get("accept", ""):
        return RedirectResponse("/ui/", status_code=307)
    return PlainTextResponse("Ollama is running")


@router.get("/api/version", responses=documented(OLLAMA, Version))
@router.head("/api/version", include_in_schema=False)
async def version():
    return {"version": __version__}


@router.get("/api/tags", responses=documented(OLLAMA, LocalModels))
@router.head("/api/tags", include_in_schema=False)
async def tags(request: Request):
    from ..hub import store

    manager = request.app.state.manager
    found = await asyncio.to_thread(store.downloaded, manager.settings, manager.catalog)
    return {"models": [{"name": m.name, "model": m.name, "modified_at": mtime_iso(int(m.modified)), "size": m.size,
                        "digest": m.revision or digest_of(m.path), "details": summary_details(m.entry)}
                       for m in found]}


class ShowRequest(ModelRequest):
    verbose: bool = False


@router.post("/api/show", openapi_extra=json_body(ShowRequest), responses=documented(OLLAMA, Show))
async def show(request: Request):
    body = await parse_body(request, ShowRequest)
    manager = request.app.state.manager
    target = manager.resolve(body.model_name)
    return render_show(manager.catalog, target.entry, target.name, target.path)


@router.get("/api/ps", responses=documented(OLLAMA, LocalModels))
async def ps(request: Request):
    manager = request.app.state.manager
    out = []
    now = time.monotonic()
    for served in sorted(manager.models.values(), key=lambda s: s.expires_at, reverse=True):
        remaining = served.expires_at - now if served.holds == 0 else served.keep_alive
        remaining = min(remaining, 292 * 365 * 86400) if math.isinf(remaining) else max(remaining, 0)
        expires = datetime.now(timezone.utc).astimezone() + timedelta(seconds=remaining)
        size = served.runner.memory_bytes
        out.append({"name": served.name, "model": served.name, "size": size, "size_vram": size,
                    "digest": "", "details": summary_details(served.target.entry),
                    "expires_at": expires.isoformat(), "context_length": served.target.context_length})
    return {"models": out}


@router.head("/api/ps", include_in_schema=False)
async def ps_head():
    return Response()
