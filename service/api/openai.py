"""OpenAI dialect: /v1/chat/completions, /v1/completions, /v1/models (+ load/unload/loaded)."""

from __future__ import annotations

import json
import time
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict

from ..engine.types import Completion, GenerationRequest, Message, Sampling
from ..errors import BadRequest, ServiceError
from .common import keep_alive, now, parse_body, stop_list, text_of
from .errors import OPENAI, error_body
from .stream import Generation, Preamble, coalesced

router = APIRouter()
FINISH = {"stop": "stop", "stop_sequence": "stop", "length": "length", "cancelled": "stop"}


class _Base(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: dict | None = None
    n: int = 1
    keep_alive: int | float | str | None = None
    ignore_eos: bool = False


class ChatRequest(_Base):
    messages: list[dict]
    max_completion_tokens: int | None = None


class CompletionRequest(_Base):
    prompt: str | list[str]


def _common(body: _Base, max_tokens: int | None) -> dict:
    if body.n != 1:
        raise BadRequest("only n=1 is supported: send one request per completion", param="n")
    if max_tokens is not None and max_tokens < 1:
        raise BadRequest("max_tokens must be at least 1", param="max_tokens")
    return dict(model=body.model, max_tokens=max_tokens, stop=stop_list(body.stop),
                sampling=Sampling(body.temperature, body.top_p, body.top_k, body.min_p, body.repetition_penalty,
                                  body.seed),
                keep_alive=keep_alive(body.keep_alive), ignore_eos=body.ignore_eos)


def _usage(c: Completion) -> dict:
    return {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
            "total_tokens": c.prompt_tokens + c.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": c.cached_tokens}}


def _sse(payload: dict | str) -> str:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n"


async def _run(request: Request, req: GenerationRequest, stream: bool, include_usage: bool, chat: bool):
    manager = request.app.state.manager
    gen = await Generation.start(manager, req)
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
    created, model = now(), gen.served.name
    obj = "chat.completion" if chat else "text_completion"

    def choice(text: str | None, finish: str | None, first: bool = False) -> dict:
        if chat:
            delta = ({"role": "assistant", "content": text or ""} if first else
                     ({"content": text} if text else {}))
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}

    def chunk(choices: list, usage: dict | None = None) -> dict:
        body = {"id": rid, "object": obj + (".chunk" if chat else ""), "created": created, "model": model,
                "system_fingerprint": None, "choices": choices}
        if include_usage:
            body["usage"] = usage
        return body

    if not stream:
        text = await gen.text()
        c = gen.completion
        if chat:
            out = {"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                   "logprobs": None, "finish_reason": FINISH[c.finish_reason]}
        else:
            out = {"index": 0, "text": text, "logprobs": None, "finish_reason": FINISH[c.finish_reason]}
        return JSONResponse({"id": rid, "object": obj, "created": created, "model": model,
                             "system_fingerprint": None, "choices": [out], "usage": _usage(c)})

    async def events():
        if chat:
            yield Preamble(_sse(chunk([choice("", None, first=True)])))
        try:
            async for piece in gen.deltas():
                yield _sse(chunk([choice(piece, None)]))
            c = gen.completion
            yield _sse(chunk([choice(None, FINISH[c.finish_reason])]))
            if include_usage:
                yield _sse(chunk([], _usage(c)))
        except ServiceError as exc:  # after the 200: the error travels in the stream
            yield _sse(error_body(OPENAI, exc, rid))
        yield _sse("[DONE]")

    return StreamingResponse(coalesced(events()), media_type="text/event-stream",
                             headers={"cache-control": "no-cache", "x-accel-buffering": "no"})


@router.post("/v1/chat/completions")
async def chat_completions(request: Request):
    body = await parse_body(request, ChatRequest)
    if not body.messages:
        raise BadRequest("messages must not be empty", param="messages")
    messages = []
    for i, m in enumerate(body.messages):
        role = m.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise BadRequest(f"messages[{i}].role must be system, developer, user, assistant or tool",
                             param=f"messages[{i}].role")
        messages.append(Message("system" if role == "developer" else role,
                                text_of(m.get("content"), f"messages[{i}].content")))
    req = GenerationRequest(messages=messages, **_common(body, body.max_completion_tokens or body.max_tokens))
    include = bool(body.stream_options and body.stream_options.get("include_usage"))
    return await _run(request, req, body.stream, include, chat=True)


@router.post("/v1/completions")
async def completions(request: Request):
    body = await parse_body(request, CompletionRequest)
    prompt = body.prompt
    if isinstance(prompt, list):
        if len(prompt) != 1:
            raise BadRequest("prompt must be one string (batches are not supported)", param="prompt")
        prompt = prompt[0]
    req = GenerationRequest(prompt=prompt, **_common(body, body.max_tokens or 16))
    include = bool(body.stream_options and body.stream_options.get("include_usage"))
    return await _run(request, req, body.stream, include, chat=False)


def _model_object(name: str, created: int, extra: dict | None = None) -> dict:
    return {"id": name, "object": "model", "created": created, "owned_by": "mlx-service", **(extra or {})}


@router.get("/v1/models")
async def list_models(request: Request):
    from .listing import available

    found = available(request.app.state.manager)
    if "anthropic-version" in request.headers:  # the Anthropic SDK lists models here too, in its own shape
        data = [{"type": "model", "id": m.name, "display_name": m.name,
                 "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(m.created))} for m in found]
        return {"data": data, "has_more": False, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None}
    models = [_model_object(m.name, m.created) for m in found]
    return {"object": "list", "data": models}


@router.get("/v1/models/loaded")
async def loaded_models(request: Request):
    manager = request.app.state.manager
    return {"object": "list", "data": [
        _model_object(s.name, int(s.loaded_at), {"active_requests": s.active, "waiting_requests": s.waiting,
                                                 "memory_bytes": s.handle.active_bytes if s.handle else 0,
                                                 "load_seconds": round(s.load_seconds, 4),
                                                 "estimate_bytes": s.target.estimate_bytes})
        for s in manager.models.values()]}


@router.post("/v1/models/{name:path}/load")
async def load_model(request: Request, name: str):
    served = await request.app.state.manager.load(name)
    return {"id": served.name, "object": "model", "loaded": True}


@router.post("/v1/models/{name:path}/unload")
async def unload_model(request: Request, name: str):
    unloaded = await request.app.state.manager.unload(name)
    return {"id": name, "object": "model", "loaded": False, "unloaded": unloaded}


@router.get("/v1/models/{name:path}")
async def get_model(request: Request, name: str):
    from .listing import describe

    info = describe(request.app.state.manager, name)
    if "anthropic-version" in request.headers:
        return {"type": "model", "id": info.name, "display_name": info.name,
                "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(info.created))}
    return _model_object(info.name, info.created)
