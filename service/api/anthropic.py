"""Anthropic dialect: /v1/messages (JSON and the exact SSE event sequence) and /v1/messages/count_tokens."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import AsyncIterator

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict

from ..engine.events import Done, Event, Result, TextDelta
from ..engine.request import GenerationRequest, Message
from ..errors import BadRequest, ServiceError
from . import finish
from .common import keep_alive, max_tokens, parse_body, sampling, stop_list, text_of
from .errors import ANTHROPIC, error_body
from .stream import Preamble, respond

router = APIRouter()


class CountRequest(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
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


def messages_request(body: MessagesRequest) -> GenerationRequest:
    return GenerationRequest(
        model=body.model, messages=_messages(body), max_tokens=max_tokens(body.max_tokens, "max_tokens"),
        stop=stop_list(body.stop_sequences, "stop_sequences"), stream=body.stream,
        sampling=sampling(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k),
        keep_alive=keep_alive(body.keep_alive), ignore_eos=body.ignore_eos)


def _sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


@dataclass
class AnthropicView:
    model: str
    media_type = "text/event-stream"
    id: str = field(default_factory=lambda: "msg_" + uuid.uuid4().hex[:24])

    def complete(self, result: Result) -> dict:
        done = result.done
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": [{"type": "text", "text": result.text}],
                "stop_reason": finish.anthropic(done.finish_reason), "stop_sequence": done.stop_sequence,
                "usage": {"input_tokens": done.usage.prompt_tokens, "output_tokens": done.usage.completion_tokens,
                          "cache_read_input_tokens": done.usage.cached_tokens}}

    async def stream(self, events: AsyncIterator[Event]):
        start = {"id": self.id, "type": "message", "role": "assistant", "content": [], "model": self.model,
                 "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}
        yield Preamble(_sse("message_start", {"type": "message_start", "message": start}))
        yield Preamble(_sse("content_block_start", {"type": "content_block_start", "index": 0,
                                                    "content_block": {"type": "text", "text": ""}}))
        async for event in events:
            if isinstance(event, TextDelta):
                yield _sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                   "delta": {"type": "text_delta", "text": event.text}})
            elif isinstance(event, Done):
                yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
                yield _sse("message_delta", {"type": "message_delta",
                                             "delta": {"stop_reason": finish.anthropic(event.finish_reason),
                                                       "stop_sequence": event.stop_sequence},
                                             "usage": {"input_tokens": event.usage.prompt_tokens,
                                                       "output_tokens": event.usage.completion_tokens}})
                yield _sse("message_stop", {"type": "message_stop"})

    def stream_error(self, error: ServiceError) -> str:
        return _sse("error", error_body(ANTHROPIC, error, self.id))


@router.post("/v1/messages")
async def messages(request: Request):
    body = await parse_body(request, MessagesRequest)
    return await respond(request, messages_request(body), lambda gen: AnthropicView(gen.model))


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request):
    body = await parse_body(request, CountRequest)
    manager = request.app.state.manager
    req = GenerationRequest(model=body.model, messages=_messages(body))
    async with await manager.lease(body.model, generating=False) as lease:  # held: no eviction meanwhile
        return {"input_tokens": await lease.served.runner.count_tokens(manager.job(lease.served, req))}
