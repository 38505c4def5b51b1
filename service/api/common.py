"""Pieces the three dialects share: JSON body parsing, keep_alive, message text, model listings."""

from __future__ import annotations

import json
import math
import time
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ConfigDict, ValidationError

from ..engine.events import ToolCall
from ..engine.request import Image, ResponseFormat, Sampling, Tool
from ..errors import BadRequest, PayloadTooLarge
from ..keepalive import parse_keep_alive

M = TypeVar("M", bound=BaseModel)


MAX_DEPTH = 64  # JSON nesting: real bodies (tool schemas included) stay far below


async def read_body(request: Request, limit: int | None = None,
                    setting: str = "MLX_SERVICE_MAX_REQUEST_BYTES") -> bytes:
    """The body, refused (413) as soon as it passes its limit (`setting`), chunked or not: an oversized body is
    never held in memory whole."""
    limit = limit or request.app.state.settings.max_request_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body of {declared} bytes is over the {limit}-byte limit ({setting})")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body is over the {limit}-byte limit ({setting})")
        chunks.append(chunk)
    return b"".join(chunks)


async def parse_body(request: Request, model: type[M]) -> M:
    """Read and validate a JSON body; every problem is a 400 naming the field (never FastAPI's 422)."""
    raw = await read_body(request)
    if not raw.strip():
        raise BadRequest("missing request body: send a JSON object")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"invalid JSON in request body: {exc}") from None
    except RecursionError:
        raise BadRequest(f"invalid JSON in request body: nested more than {MAX_DEPTH} levels deep") from None
    if not isinstance(data, dict):
        raise BadRequest("the request body must be a JSON object")
    check_json(data)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise BadRequest(f"{where}: {first['msg']}", param=where) from None


def check_json(data: Any) -> None:
    """Refuse what JSON can carry but nothing downstream should see: nesting deeper than MAX_DEPTH, and text
    that is not Unicode (a lone surrogate such as "\\ud800", which tokenizers and file systems choke on)."""
    stack = [(data, 1, "")]
    while stack:
        value, depth, where = stack.pop()
        if depth > MAX_DEPTH:
            raise BadRequest(f"the request body is nested more than {MAX_DEPTH} levels deep (at {where or 'body'})")
        if isinstance(value, dict):
            for key, item in value.items():
                _text(key, where)
                stack.append((item, depth + 1, f"{where}.{key}" if where else str(key)))
        elif isinstance(value, list):
            stack.extend((item, depth + 1, f"{where}[{i}]") for i, item in enumerate(value))
        elif isinstance(value, str):
            _text(value, where)


def _text(value: str, where: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(f"{where or 'body'}: text must be valid Unicode (a lone surrogate like \\ud800 is not)",
                         param=where or None) from None


class ModelRequest(BaseModel):
    """An Ollama body naming a model: `model`, or the older `name`."""

    model_config = ConfigDict(extra="allow")
    model: str = ""
    name: str | None = None  # legacy alias of `model`

    @property
    def model_name(self) -> str:
        return (self.model or self.name or "").strip()


def json_body(model: type[BaseModel]) -> dict:
    """The OpenAPI request body of a route that reads `model` itself (with `parse_body`, for its own errors)."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}


def keep_alive(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return parse_keep_alive(value)
    except ValueError as exc:
        raise BadRequest(str(exc), param="keep_alive") from None


def text_of(content: Any, where: str) -> str:
    """A message's content as text: a string, or a list of text parts/blocks (OpenAI and Anthropic)."""
    text, images = content_of(content, where)
    if images:
        raise BadRequest(f"{where}: images can only be sent in user messages", param=where)
    return text


def content_of(content: Any, where: str) -> tuple[str, tuple[Image, ...]]:
    """A message's text and images: a string, or a list of OpenAI parts / Anthropic blocks."""
    from .images import from_base64, from_url

    if content is None:
        return "", ()
    if isinstance(content, str):
        return content, ()
    if not isinstance(content, list):
        raise BadRequest(f"{where}: content must be a string or a list of parts", param=where)
    pieces, images = [], []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        at = f"{where}[{i}]"
        if kind in ("text", "input_text"):
            pieces.append(str(part.get("text", "")))
        elif kind == "image_url":  # OpenAI: {"image_url": {"url": ...}} (or the URL itself)
            ref = part.get("image_url")
            images.append(from_url(ref.get("url") if isinstance(ref, dict) else ref, at))
        elif kind == "input_image":
            images.append(from_url(part.get("image_url"), at))
        elif kind == "image":  # Anthropic: {"source": {"type": "base64", "data": ...} | {"type": "url", ...}}
            source = part.get("source") if isinstance(part.get("source"), dict) else {}
            images.append(from_base64(source.get("data"), at) if source.get("type") == "base64"
                          else from_url(source.get("url"), at))
        elif kind in ("input_audio", "document", "file", "audio"):
            raise BadRequest(f"{where}: `{kind}` content is not read here: send audio to /v1/audio/transcriptions",
                             param=where)
        else:
            raise BadRequest(f"{where}: unsupported content part {kind!r}", param=where)
    return "".join(pieces), tuple(images)


def stop_list(value: Any, where: str = "stop") -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise BadRequest(f"{where} must be a string or a list of strings", param=where)


def now() -> int:
    return int(time.time())


# name -> (lowest, highest, whether the lowest itself is allowed, integer)
_SAMPLING_RANGES = {"temperature": (0.0, 100.0, True, False), "top_p": (0.0, 1.0, True, False),
                    "top_k": (0, 1_000_000, True, True), "min_p": (0.0, 1.0, True, False),
                    "repetition_penalty": (0.0, 100.0, False, False), "seed": (-(2**63), 2**64 - 1, True, True)}


def number(value: Any, where: str, low: float, high: float, *, inclusive: bool = True, integer: bool = False):
    """A user's number, checked for type, finiteness and range; a 400 naming `where` otherwise."""
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and isinstance(value, float)
                                                                          and not value.is_integer()):
        raise BadRequest(f"{where} must be {kind}", param=where)
    if not math.isfinite(value) or value > high or value < low or (value == low and not inclusive):
        bound = f"{'at least' if inclusive else 'more than'} {low:g} and at most {high:g}"
        raise BadRequest(f"{where} must be {bound}, not {value!r}", param=where)
    return int(value) if integer else float(value)


def sampling(prefix: str = "", **given: Any) -> Sampling:
    """The request's sampling, every given value checked (`prefix` names where it sat, e.g. "options.")."""
    checked = {}
    for name, value in given.items():
        if value is not None:
            low, high, inclusive, integer = _SAMPLING_RANGES[name]
            checked[name] = number(value, prefix + name, low, high, inclusive=inclusive, integer=integer)
    return Sampling(**checked)


def max_tokens(value: Any, where: str) -> int | None:
    """A token limit the user gave (None: not given); 0 and negatives are refused, never replaced."""
    return None if value is None else number(value, where, 1, 2**31, integer=True)


def tool(name: Any, description: Any, parameters: Any, where: str) -> Tool:
    """One tool definition, checked: a name, and parameters that are a JSON Schema object."""
    if not isinstance(name, str) or not name.strip() or len(name) > 128:
        raise BadRequest(f"{where}.name must be a non-empty string of at most 128 characters", param=where)
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    if not isinstance(parameters, dict):
        raise BadRequest(f"{where}: the parameters must be a JSON Schema object", param=where)
    return Tool(name, description if isinstance(description, str) else "", parameters)


def function_tools(value: Any, where: str = "tools") -> list[Tool]:
    """OpenAI's (and Ollama's) `tools`: `[{type: "function", function: {name, description, parameters}}]`."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequest(f"{where} must be a list", param=where)
    out = []
    for i, item in enumerate(value):
        fn = item.get("function") if isinstance(item, dict) else None
        if not isinstance(fn, dict) or item.get("type", "function") != "function":
            raise BadRequest(f"{where}[{i}] must be {{\"type\": \"function\", \"function\": {{...}}}}",
                             param=f"{where}[{i}]")
        out.append(tool(fn.get("name"), fn.get("description"), fn.get("parameters"), f"{where}[{i}].function"))
    return out


def function_calls(value: Any, where: str) -> tuple[ToolCall, ...]:
    """An assistant message's `tool_calls` (OpenAI: arguments as a JSON string; Ollama: as an object)."""
    if not value:
        return ()
    if not isinstance(value, list):
        raise BadRequest(f"{where} must be a list", param=where)
    out = []
    for i, call in enumerate(value):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise BadRequest(f"{where}[{i}].function.name is required", param=f"{where}[{i}]")
        args = fn.get("arguments", {})
        out.append(ToolCall(str(call.get("id") or ""), fn["name"],
                            args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)))
    return tuple(out)


def json_schema(value: Any, where: str) -> ResponseFormat:
    if not isinstance(value, dict):
        raise BadRequest(f"{where} must be a JSON Schema object", param=where)
    return ResponseFormat(schema=value)
