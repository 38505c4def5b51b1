"""Pieces the three dialects share: JSON body parsing, keep_alive, message text, model listings."""

from __future__ import annotations

import json
import time
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from ..errors import BadRequest, PayloadTooLarge
from ..keepalive import parse_keep_alive

M = TypeVar("M", bound=BaseModel)


async def parse_body(request: Request, model: type[M]) -> M:
    """Read and validate a JSON body; every problem is a 400 naming the field (never FastAPI's 422)."""
    raw = await request.body()
    limit = request.app.state.settings.max_request_bytes
    if len(raw) > limit:
        raise PayloadTooLarge(f"request body of {len(raw)} bytes is over the {limit}-byte limit "
                              "(MLX_SERVICE_MAX_REQUEST_BYTES)")
    if not raw.strip():
        raise BadRequest("missing request body: send a JSON object")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"invalid JSON in request body: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("the request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise BadRequest(f"{where}: {first['msg']}", param=where) from None


def keep_alive(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return parse_keep_alive(value)
    except ValueError as exc:
        raise BadRequest(str(exc), param="keep_alive") from None


def text_of(content: Any, where: str) -> str:
    """A message's content as text: a string, or a list of text parts/blocks (OpenAI and Anthropic)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in ("text", "input_text"):
                pieces.append(str(part.get("text", "")))
            elif kind in ("image_url", "image", "input_image", "input_audio", "document"):
                raise BadRequest(f"{where}: `{kind}` content needs a vision or audio model, which this version of "
                                 "MLX Service does not serve yet", param=where)
            else:
                raise BadRequest(f"{where}: unsupported content part {kind!r}", param=where)
        return "".join(pieces)
    raise BadRequest(f"{where}: content must be a string or a list of parts", param=where)


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
