"""Anthropic dialect: /v1/messages (JSON and the exact SSE event sequence) and /v1/messages/count_tokens."""

from __future__ import annotations

import json
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict

from ..engine.types import GenerationRequest, Message, Sampling
from ..errors import BadRequest, ServiceError
from .common import keep_alive, parse_body, stop_list, text_of
from .errors import ANTHROPIC, error_body
from .stream import Generation, Preamble, coalesced

router = APIRouter()
STOP_REASON = {"stop": "end_turn", "stop_sequence": "stop_sequence", "length": "max_tokens",
               "cancelled": "end_turn"}


class CountRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    messages: list[dict]
    system: str | list[dict] | None = None


class MessagesRequest(CountRequest):
    max_tokens: int
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stream: bool = False
    keep_alive: int | float | str | None = None
    ignore_eos: bool = False


def _messages(body: CountRequest) -> list[Message]:
    out = []
    if body.system:
        out.append(Message("system", text_of(body.system, "system")))
    if not body.messages:
        raise BadRequest("messages: at least one message is required")
    for i, m in enumerate(body.messages):
        role = m.get("role")
        if role not in ("user", "assistant"):
            raise BadRequest(f"messages.{i}.role: must be 'user' or 'assistant'")
        content = text_of(m.get("content"), f"messages.{i}.content")
        if out and out[-1].role == role:  # consecutive same-role turns are merged, as upstream does
            out[-1] = Message(role, out[-1].content + "\n\n" + content)
        else:
            out.append(Message(role, content))
    return out


def _sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


@router.post("/v1/messages")
async def messages(request: Request):
    body = await parse_body(request, MessagesRequest)
    if body.max_tokens < 1:
        raise BadRequest("max_tokens: must be at least 1")
    req = GenerationRequest(
        model=body.model, messages=_messages(body), max_tokens=body.max_tokens,
        stop=stop_list(body.stop_sequences, "stop_sequences"),
        sampling=Sampling(body.temperature, body.top_p, body.top_k), keep_alive=keep_alive(body.keep_alive),
        ignore_eos=body.ignore_eos)
    gen = await Generation.start(request.app.state.manager, req)
    mid = "msg_" + uuid.uuid4().hex[:24]
    model = gen.served.name
    if not body.stream:
        text = await gen.text()
        c = gen.completion
        return JSONResponse({"id": mid, "type": "message", "role": "assistant", "model": model,
                             "content": [{"type": "text", "text": text}],
                             "stop_reason": STOP_REASON[c.finish_reason], "stop_sequence": c.stop_sequence,
                             "usage": {"input_tokens": c.prompt_tokens, "output_tokens": c.completion_tokens,
                                       "cache_read_input_tokens": c.cached_tokens}})

    async def events():
        start = {"id": mid, "type": "message", "role": "assistant", "content": [], "model": model,
                 "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}
        yield Preamble(_sse("message_start", {"type": "message_start", "message": start}))
        yield Preamble(_sse("content_block_start", {"type": "content_block_start", "index": 0,
                                                    "content_block": {"type": "text", "text": ""}}))
        try:
            async for piece in gen.deltas():
                yield _sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                   "delta": {"type": "text_delta", "text": piece}})
        except ServiceError as exc:
            yield _sse("error", error_body(ANTHROPIC, exc, mid))
            return
        c = gen.completion
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        yield _sse("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": STOP_REASON[c.finish_reason],
                                               "stop_sequence": c.stop_sequence},
                                     "usage": {"input_tokens": c.prompt_tokens,
                                               "output_tokens": c.completion_tokens}})
        yield _sse("message_stop", {"type": "message_stop"})

    return StreamingResponse(coalesced(events()), media_type="text/event-stream",
                             headers={"cache-control": "no-cache"})


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request):
    body = await parse_body(request, CountRequest)
    manager = request.app.state.manager
    req = GenerationRequest(model=body.model, messages=_messages(body))
    served = await manager.load(body.model)
    return {"input_tokens": await manager.count_tokens(served, req)}
