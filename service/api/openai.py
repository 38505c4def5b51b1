"""OpenAI dialect: /v1/chat/completions, /v1/completions, /v1/models (+ load/unload/loaded)."""

from __future__ import annotations

import base64
import json
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict

from ..engine.events import Done, Event, Result, TextDelta, ThinkingDelta, ToolCall, Usage
from ..engine.request import GenerationRequest, Message, ResponseFormat, Thinking, ToolChoice
from ..errors import BadRequest, ServiceError
from . import finish
from .common import (
    content_of,
    function_calls,
    function_tools,
    json_body,
    json_schema,
    keep_alive,
    max_tokens,
    now,
    parse_body,
    sampling,
    stop_list,
    text_of,
)
from .embed import embed, embedding_job
from .errors import OPENAI, error_body
from .schemas import (
    SSE,
    ChatCompletion,
    EmbeddingList,
    LoadAnswer,
    LoadedList,
    ModelList,
    ModelObject,
    TextCompletion,
    documented,
)
from .show import capabilities
from .stream import Preamble, respond

router = APIRouter()


class _Base(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
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
    response_format: dict | None = None


class ChatRequest(_Base):
    messages: list[dict]
    max_completion_tokens: int | None = None
    tools: list | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool = True
    reasoning_effort: str | None = None


class CompletionRequest(_Base):
    prompt: str | list[str]


def _request(body: _Base, limit: int | None, **what) -> GenerationRequest:
    if body.n != 1:
        raise BadRequest("only n=1 is supported: send one request per completion", param="n")
    return GenerationRequest(
        model=body.model, max_tokens=limit, stop=stop_list(body.stop), stream=body.stream,
        sampling=sampling(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k, min_p=body.min_p,
                          repetition_penalty=body.repetition_penalty, seed=body.seed),
        keep_alive=keep_alive(body.keep_alive), ignore_eos=body.ignore_eos,
        response_format=_response_format(body.response_format), **what)


def _response_format(value: dict | None) -> ResponseFormat | None:
    kind = (value or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return ResponseFormat()
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise BadRequest("response_format.json_schema.schema is required", param="response_format")
        return json_schema(spec["schema"], "response_format.json_schema.schema")
    raise BadRequest(f"response_format.type must be text, json_object or json_schema, not {kind!r}",
                     param="response_format")


def _tool_choice(value) -> ToolChoice:
    if value is None or value in ("auto", "none", "required"):
        return ToolChoice(value or "auto")
    if isinstance(value, dict) and isinstance((value.get("function") or {}).get("name"), str):
        return ToolChoice("named", value["function"]["name"])
    raise BadRequest('tool_choice must be "none", "auto", "required" or {"type": "function", "function": '
                     '{"name": ...}}', param="tool_choice")


_EFFORTS = ("none", "minimal", "low", "medium", "high")


def _thinking(effort: str | None) -> Thinking:
    if effort is None:
        return Thinking()
    if effort not in _EFFORTS:
        raise BadRequest(f"reasoning_effort must be one of {', '.join(_EFFORTS)}", param="reasoning_effort")
    return Thinking(enabled=False) if effort == "none" else Thinking(enabled=True, effort=effort)


def _message(m: dict, i: int) -> Message:
    role = m.get("role")
    where = f"messages[{i}]"
    if role not in ("system", "developer", "user", "assistant", "tool"):
        raise BadRequest(f"{where}.role must be system, developer, user, assistant or tool", param=f"{where}.role")
    if role == "user":
        text, images = content_of(m.get("content"), f"{where}.content")
        return Message("user", text, images=images)
    content = text_of(m.get("content"), f"{where}.content")
    if role == "tool":
        return Message("tool", content, tool_call_id=str(m.get("tool_call_id") or ""),
                       name=m.get("name") if isinstance(m.get("name"), str) else None)
    if role == "assistant":
        thinking = m.get("reasoning_content") or m.get("reasoning")
        return Message("assistant", content, tool_calls=function_calls(m.get("tool_calls"), f"{where}.tool_calls"),
                       thinking=thinking if isinstance(thinking, str) else None)
    return Message("system" if role == "developer" else role, content)


def chat_request(body: ChatRequest) -> GenerationRequest:
    if not body.messages:
        raise BadRequest("messages must not be empty", param="messages")
    messages = [_message(m if isinstance(m, dict) else {}, i) for i, m in enumerate(body.messages)]
    names = {c.id: c.name for m in messages for c in m.tool_calls}
    messages = [Message("tool", m.content, tool_call_id=m.tool_call_id, name=names.get(m.tool_call_id))
                if m.role == "tool" and m.name is None else m for m in messages]
    limit = max_tokens(body.max_completion_tokens, "max_completion_tokens")
    if limit is None:
        limit = max_tokens(body.max_tokens, "max_tokens")
    return _request(body, limit, messages=messages, tools=function_tools(body.tools),
                    tool_choice=_tool_choice(body.tool_choice), parallel_tool_calls=body.parallel_tool_calls,
                    thinking=_thinking(body.reasoning_effort))


def completion_request(body: CompletionRequest) -> GenerationRequest:
    prompt = body.prompt
    if isinstance(prompt, list):
        if len(prompt) != 1:
            raise BadRequest("prompt must be one string (batches are not supported)", param="prompt")
        prompt = prompt[0]
    limit = max_tokens(body.max_tokens, "max_tokens")
    return _request(body, 16 if limit is None else limit, prompt=prompt)  # 16: the API's own default


def _call(c: ToolCall) -> dict:
    return {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}


def _usage(u: Usage) -> dict:
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "total_tokens": u.prompt_tokens + u.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": u.cached_tokens}}


def _sse(payload: dict | str) -> str:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n"


@dataclass
class OpenAIView:
    """Chat completions (`chat`) or legacy text completions, as one JSON body or SSE chunks."""

    model: str
    chat: bool
    include_usage: bool = False
    media_type = "text/event-stream"
    created: int = field(default_factory=now)
    id: str = ""

    def __post_init__(self):
        self.id = self.id or ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex[:24]

    @property
    def _object(self) -> str:
        return "chat.completion" if self.chat else "text_completion"

    def complete(self, result: Result) -> dict:
        reason = finish.openai(result.done.finish_reason)
        if self.chat:
            message = {"role": "assistant", "content": result.text or (None if result.tool_calls else ""),
                       "refusal": None}
            if result.thinking:
                message["reasoning_content"] = message["reasoning"] = result.thinking
            if result.tool_calls:
                message["tool_calls"] = [_call(c) for c in result.tool_calls]
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": reason}
        else:
            choice = {"index": 0, "text": result.text, "logprobs": None, "finish_reason": reason}
        return {"id": self.id, "object": self._object, "created": self.created, "model": self.model,
                "system_fingerprint": None, "choices": [choice], "usage": _usage(result.done.usage)}

    def _chunk(self, choices: list, usage: dict | None = None) -> str:
        body = {"id": self.id, "object": self._object + (".chunk" if self.chat else ""), "created": self.created,
                "model": self.model, "system_fingerprint": None, "choices": choices}
        if self.include_usage:
            body["usage"] = usage
        return _sse(body)

    def _choice(self, text: str | None, reason: str | None, first: bool = False) -> dict:
        if self.chat:
            delta = {"role": "assistant", "content": text or ""} if first else ({"content": text} if text else {})
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}

    def _delta(self, delta: dict) -> str:
        return self._chunk([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}])

    async def stream(self, events: AsyncIterator[Event]):
        if self.chat:
            yield Preamble(self._chunk([self._choice("", None, first=True)]))
        calls = 0
        async for event in events:
            if isinstance(event, TextDelta):
                yield self._chunk([self._choice(event.text, None)])
            elif isinstance(event, ThinkingDelta) and self.chat:
                yield self._delta({"reasoning_content": event.text, "reasoning": event.text})
            elif isinstance(event, ToolCall) and self.chat:  # id, type and name first; then the arguments
                head = _call(event) | {"index": calls}
                head["function"] = {"name": event.name, "arguments": ""}
                yield self._delta({"tool_calls": [head]})
                yield self._delta({"tool_calls": [{"index": calls, "function": {"arguments": event.arguments}}]})
                calls += 1
            elif isinstance(event, Done):
                yield self._chunk([self._choice(None, finish.openai(event.finish_reason))])
                if self.include_usage:
                    yield self._chunk([], _usage(event.usage))
        yield _sse("[DONE]")

    def stream_error(self, error: ServiceError) -> str:
        return _sse(error_body(OPENAI, error, self.id)) + _sse("[DONE]")


def _view(body: _Base, chat: bool):
    include = bool(body.stream_options and body.stream_options.get("include_usage"))
    return lambda gen: OpenAIView(gen.model, chat, include)


@router.post("/v1/chat/completions", openapi_extra=json_body(ChatRequest),
             responses=documented(OPENAI, ChatCompletion, SSE))
async def chat_completions(request: Request):
    body = await parse_body(request, ChatRequest)
    return await respond(request, chat_request(body), _view(body, chat=True))


@router.post("/v1/completions", openapi_extra=json_body(CompletionRequest),
             responses=documented(OPENAI, TextCompletion, SSE))
async def completions(request: Request):
    body = await parse_body(request, CompletionRequest)
    return await respond(request, completion_request(body), _view(body, chat=False))


class EmbeddingsRequest(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    model: str
    input: Any
    encoding_format: str = "float"
    dimensions: Any = None
    keep_alive: int | float | str | None = None


@router.post("/v1/embeddings", openapi_extra=json_body(EmbeddingsRequest), responses=documented(OPENAI, EmbeddingList))
async def embeddings(request: Request):
    body = await parse_body(request, EmbeddingsRequest)
    if body.encoding_format not in ("float", "base64"):
        raise BadRequest("encoding_format must be float or base64", param="encoding_format")
    job = embedding_job(body.input, truncate=False, dimensions=body.dimensions)
    done = await embed(request, body.model, job, keep_alive(body.keep_alive))
    data = [{"object": "embedding", "index": i,
             "embedding": _base64(v) if body.encoding_format == "base64" else v}
            for i, v in enumerate(done.result.vectors)]
    tokens = done.result.prompt_tokens
    return JSONResponse({"object": "list", "data": data, "model": done.model,  # as is: no per-float re-encoding
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


def _base64(vector: list[float]) -> str:
    """OpenAI's base64 encoding: the float32 values, little-endian."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def _model_object(name: str, created: int, extra: dict | None = None) -> dict:
    return {"id": name, "object": "model", "created": created, "owned_by": "mlx-service", **(extra or {})}


@router.get("/v1/models", responses=documented(OPENAI, ModelList))
async def list_models(request: Request):
    from .listing import available

    found = available(request.app.state.manager)
    if "anthropic-version" in request.headers:  # the Anthropic SDK lists models here too, in its own shape
        data = [{"type": "model", "id": m.name, "display_name": m.name,
                 "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(m.created))} for m in found]
        return {"data": data, "has_more": False, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None}
    models = [_model_object(m.name, m.created, {"capabilities": capabilities(m.entry)}) for m in found]
    return {"object": "list", "data": models}


@router.get("/v1/models/loaded", responses=documented(OPENAI, LoadedList))
async def loaded_models(request: Request):
    manager = request.app.state.manager
    return {"object": "list", "data": [
        _model_object(s.name, int(s.loaded_at), {"active_requests": s.generating, "waiting_requests": s.waiting,
                                                 "batch_size": s.runner.capacity, "runner": s.runner.stats(),
                                                 "memory_bytes": s.runner.memory_bytes,
                                                 "load_seconds": round(s.load_seconds, 4),
                                                 "estimate_bytes": s.target.estimate_bytes})
        for s in manager.models.values()]}


@router.post("/v1/models/{name:path}/load", responses=documented(OPENAI, LoadAnswer))
async def load_model(request: Request, name: str):
    served = await request.app.state.manager.load(name)
    return {"id": served.name, "object": "model", "loaded": True}


@router.post("/v1/models/{name:path}/unload", responses=documented(OPENAI, LoadAnswer))
async def unload_model(request: Request, name: str):
    unloaded = await request.app.state.manager.unload(name)
    return {"id": name, "object": "model", "loaded": False, "unloaded": unloaded}


@router.get("/v1/models/{name:path}", responses=documented(OPENAI, ModelObject))
async def get_model(request: Request, name: str):
    from .listing import describe

    info = describe(request.app.state.manager, name)
    if "anthropic-version" in request.headers:
        return {"type": "model", "id": info.name, "display_name": info.name,
                "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(info.created))}
    return _model_object(info.name, info.created, {"capabilities": capabilities(info.entry)})
