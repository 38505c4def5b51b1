"""Anthropic dialect: /v1/messages (JSON and the exact SSE event sequence) and /v1/messages/count_tokens."""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import AsyncIterator

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict

from ..engine.events import Done, Event, Result, TextDelta, ThinkingDelta, ToolCall
from ..engine.request import GenerationRequest, Message, Thinking, ToolChoice
from ..errors import BadRequest, ServiceError
from . import finish
from .common import (
    content_of,
    json_body,
    keep_alive,
    max_tokens,
    number,
    parse_body,
    sampling,
    stop_list,
    text_of,
    tool,
)
from .errors import ANTHROPIC, error_body
from .images import load_images
from .schemas import SSE, AnthropicMessage, TokenCount, documented
from .stream import Preamble, respond

router = APIRouter()


class CountRequest(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    model: str
    messages: list[dict]
    system: str | list[dict] | None = None
    tools: list | None = None
    tool_choice: dict | None = None
    thinking: dict | None = None


class MessagesRequest(CountRequest):
    max_tokens: int
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stream: bool = False
    keep_alive: int | float | str | None = None
    ignore_eos: bool = False


# Claude Code heads its system prompt with a line that changes every request; it means nothing to a local
# model and would make every turn's prompt new to the prefix cache.
_VOLATILE = ("x-anthropic-billing-header:",)


def _system(text: str) -> str:
    lines = text.split("\n")
    while lines and lines[0].strip().lower().startswith(_VOLATILE):
        lines.pop(0)
    return "\n".join(lines).lstrip("\n")


def _blocks(content, where: str) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise BadRequest(f"{where}: content must be a string or a list of content blocks")
    return content


def _turn(role: str, blocks: list[dict], where: str, names: dict[str, str]) -> list[Message]:
    """One Anthropic message as engine messages: tool results become `tool` messages of their own."""
    out, text, thinking, calls, images = [], [], [], [], []
    for j, b in enumerate(blocks):
        kind, at = b.get("type"), f"{where}.content.{j}"
        if kind == "tool_result" and role == "user":
            result = text_of(b.get("content"), f"{at}.content")
            call_id = str(b.get("tool_use_id") or "")
            out.append(Message("tool", ("Error: " + result) if b.get("is_error") else result,
                               tool_call_id=call_id, name=names.get(call_id)))
        elif kind == "tool_use" and role == "assistant":
            if not isinstance(b.get("name"), str) or not isinstance(b.get("input", {}), dict):
                raise BadRequest(f"{at}: a tool_use block needs a name and an input object")
            calls.append(ToolCall(str(b.get("id") or ""), b["name"], json.dumps(b.get("input", {}))))
            names[calls[-1].id] = b["name"]
        elif kind == "thinking" and role == "assistant":
            thinking.append(str(b.get("thinking", "")))
        elif kind == "redacted_thinking":
            continue
        elif kind == "image" and role == "user":
            images += content_of([b], at)[1]
        else:
            text.append(text_of([b], at))
    if text or calls or thinking or images or not out:
        message = Message(role, "".join(text), tool_calls=tuple(calls), thinking="".join(thinking) or None,
                          images=tuple(images))
        out = out + [message] if role == "user" else [message] + out
    return out


def _messages(body: CountRequest) -> list[Message]:
    out = []
    if body.system:
        out.append(Message("system", _system(text_of(body.system, "system"))))
    if not body.messages:
        raise BadRequest("messages: at least one message is required")
    names: dict[str, str] = {}
    for i, m in enumerate(body.messages):
        role = m.get("role")
        if role not in ("user", "assistant", "system"):  # Claude Code sends `system` turns inside messages
            raise BadRequest(f"messages.{i}.role: must be 'user' or 'assistant'")
        if role == "system":
            out.append(Message("system", _system(text_of(m.get("content"), f"messages.{i}.content"))))
            continue
        for message in _turn(role, _blocks(m.get("content"), f"messages.{i}"), f"messages.{i}", names):
            last = out[-1] if out else None
            if (last and last.role == message.role and message.role in ("user", "assistant")
                    and not (last.tool_calls or message.tool_calls or message.thinking or last.images
                             or message.images)):
                out[-1] = Message(last.role, last.content + "\n\n" + message.content, thinking=last.thinking)
            else:  # consecutive same-role text turns are merged, as upstream does
                out.append(message)
    return out


def _tools(value) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequest("tools: must be a list")
    out = []
    for i, t in enumerate(value):
        if not isinstance(t, dict) or t.get("type", "custom") not in ("custom", None):
            kind = t.get("type") if isinstance(t, dict) else None
            raise BadRequest(f"tools.{i}: server tool {kind!r} is not available here; define it as a custom tool "
                             "with name, description and input_schema")
        out.append(tool(t.get("name"), t.get("description"), t.get("input_schema"), f"tools.{i}"))
    return out


def _tool_choice(value: dict | None) -> tuple[ToolChoice, bool]:
    """(the choice, whether parallel calls are allowed)."""
    if value is None:
        return ToolChoice(), True
    kind = value.get("type")
    parallel = not value.get("disable_parallel_tool_use", False)
    if kind in ("auto", "none"):
        return ToolChoice(kind), parallel
    if kind == "any":
        return ToolChoice("required"), parallel
    if kind == "tool" and isinstance(value.get("name"), str):
        return ToolChoice("named", value["name"]), parallel
    raise BadRequest('tool_choice: type must be "auto", "any", "none" or "tool" (with a name)')


def _thinking(value: dict | None, limit: int | None) -> Thinking:
    if value is None:
        return Thinking()
    kind = value.get("type")
    if kind == "disabled":
        return Thinking(enabled=False)
    if kind != "enabled":
        raise BadRequest('thinking.type must be "enabled" or "disabled"')
    budget = number(value.get("budget_tokens"), "thinking.budget_tokens", 1, 2**31, integer=True)
    if limit is not None and budget >= limit:
        raise BadRequest("thinking.budget_tokens must be less than max_tokens")
    return Thinking(enabled=True, budget=budget)


def _conversation(body: CountRequest, limit: int | None = None) -> dict:
    choice, parallel = _tool_choice(body.tool_choice)
    return {"messages": _messages(body), "tools": _tools(body.tools), "tool_choice": choice,
            "parallel_tool_calls": parallel, "thinking": _thinking(body.thinking, limit)}


def messages_request(body: MessagesRequest) -> GenerationRequest:
    limit = max_tokens(body.max_tokens, "max_tokens")
    return GenerationRequest(
        model=body.model, max_tokens=limit, stop=stop_list(body.stop_sequences, "stop_sequences"),
        stream=body.stream, sampling=sampling(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k),
        keep_alive=keep_alive(body.keep_alive), ignore_eos=body.ignore_eos, **_conversation(body, limit))


def _sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def _signature(thinking: str) -> str:
    """Anthropic clients send thinking blocks back with their signature; ours is a digest of the text."""
    return base64.b64encode(hashlib.sha256(thinking.encode()).digest()).decode()


def _tool_use(call: ToolCall) -> dict:
    try:
        arguments = json.loads(call.arguments)
    except ValueError:
        arguments = {}
    suffix = call.id.removeprefix("call_")
    return {"type": "tool_use", "id": call.id if call.id.startswith("toolu_") else "toolu_" + suffix,
            "name": call.name, "input": arguments if isinstance(arguments, dict) else {"value": arguments}}


class _Blocks:
    """The open content block of a streamed message: a new kind of content closes it and opens the next."""

    def __init__(self):
        self.index, self.kind, self.thinking = -1, None, ""

    def open(self, kind: str, block: dict, new: bool = False) -> str:
        if kind == self.kind and not new:
            return ""
        out = self.close()
        self.index, self.kind = self.index + 1, kind
        return out + _sse("content_block_start", {"type": "content_block_start", "index": self.index,
                                                  "content_block": {"type": kind, **block}})

    def delta(self, delta: dict) -> str:
        if delta["type"] == "thinking_delta":
            self.thinking += delta["thinking"]
        return _sse("content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta})

    def close(self) -> str:
        if self.kind is None:
            return ""
        out = self.delta({"type": "signature_delta", "signature": _signature(self.thinking)}) \
            if self.kind == "thinking" else ""
        out += _sse("content_block_stop", {"type": "content_block_stop", "index": self.index})
        self.kind, self.thinking = None, ""
        return out


@dataclass
class AnthropicView:
    model: str
    media_type = "text/event-stream"
    id: str = field(default_factory=lambda: "msg_" + uuid.uuid4().hex[:24])

    def complete(self, result: Result) -> dict:
        done = result.done
        content = [{"type": "thinking", "thinking": result.thinking, "signature": _signature(result.thinking)}
                   ] if result.thinking else []
        if result.text or not result.tool_calls:
            content.append({"type": "text", "text": result.text})
        content += [_tool_use(c) for c in result.tool_calls]
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content,
                "stop_reason": finish.anthropic(done.finish_reason), "stop_sequence": done.stop_sequence,
                "usage": {"input_tokens": done.usage.prompt_tokens, "output_tokens": done.usage.completion_tokens,
                          "cache_read_input_tokens": done.usage.cached_tokens}}

    async def stream(self, events: AsyncIterator[Event]):
        start = {"id": self.id, "type": "message", "role": "assistant", "content": [], "model": self.model,
                 "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}
        yield Preamble(_sse("message_start", {"type": "message_start", "message": start}))
        blocks = _Blocks()
        async for event in events:
            if isinstance(event, TextDelta):
                yield blocks.open("text", {"text": ""}) + blocks.delta({"type": "text_delta", "text": event.text})
            elif isinstance(event, ThinkingDelta):
                yield blocks.open("thinking", {"thinking": "", "signature": ""}) + blocks.delta(
                    {"type": "thinking_delta", "thinking": event.text})
            elif isinstance(event, ToolCall):
                use = _tool_use(event)
                yield (blocks.open("tool_use", {"id": use["id"], "name": use["name"], "input": {}}, new=True)
                       + blocks.delta({"type": "input_json_delta", "partial_json": event.arguments}))
            elif isinstance(event, Done):
                if blocks.index < 0:  # nothing was said: one empty text block, as upstream sends
                    yield blocks.open("text", {"text": ""})
                yield blocks.close()
                yield _sse("message_delta", {"type": "message_delta",
                                             "delta": {"stop_reason": finish.anthropic(event.finish_reason),
                                                       "stop_sequence": event.stop_sequence},
                                             "usage": {"input_tokens": event.usage.prompt_tokens,
                                                       "output_tokens": event.usage.completion_tokens}})
                yield _sse("message_stop", {"type": "message_stop"})

    def stream_error(self, error: ServiceError) -> str:
        return _sse("error", error_body(ANTHROPIC, error, self.id))


@router.post("/v1/messages", openapi_extra=json_body(MessagesRequest),
             responses=documented(ANTHROPIC, AnthropicMessage, SSE))
async def messages(request: Request):
    body = await parse_body(request, MessagesRequest)
    return await respond(request, messages_request(body), lambda gen: AnthropicView(gen.model))


@router.post("/v1/messages/count_tokens", openapi_extra=json_body(CountRequest),
             responses=documented(ANTHROPIC, TokenCount))
async def count_tokens(request: Request):
    body = await parse_body(request, CountRequest)
    manager = request.app.state.manager
    req = GenerationRequest(model=body.model, **_conversation(body))
    target = manager.resolve(body.model)
    job = await load_images(manager.job(req, target), request.app.state.settings.max_image_bytes)
    async with await manager.lease(body.model, generating=False, target=target) as lease:  # held: no eviction meanwhile
        return {"input_tokens": await lease.served.runner.count_tokens(job)}
