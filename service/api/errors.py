"""Map the service's typed errors to each API dialect's error body and status, once."""

from __future__ import annotations

import uuid

from fastapi import Request
from fastapi.responses import JSONResponse

from ..errors import ServiceError

OPENAI, OLLAMA, ANTHROPIC = "openai", "ollama", "anthropic"


def dialect(request: Request) -> str:
    path = request.url.path
    if path.startswith("/v1/messages") or (path.startswith("/v1/") and "anthropic-version" in request.headers):
        return ANTHROPIC
    if path.startswith("/v1/"):
        return OPENAI
    return OLLAMA


def request_id(request: Request) -> str:
    rid = getattr(request.state, "request_id", None)
    if rid is None:
        rid = request.state.request_id = "req_" + uuid.uuid4().hex[:24]
    return rid


def error_body(kind: str, error: ServiceError, rid: str) -> dict:
    if kind == OPENAI:
        return {"error": {"message": error.message, "type": error.openai_type, "param": error.param,
                          "code": error.openai_code}}
    if kind == ANTHROPIC:
        return {"type": "error", "error": {"type": error.anthropic_type, "message": error.message},
                "request_id": rid}
    return {"error": error.message}


def status_for(kind: str, error: ServiceError) -> int:
    if kind == ANTHROPIC and error.anthropic_type == "overloaded_error":
        return 529
    return error.status


def error_response(request: Request, error: ServiceError) -> JSONResponse:
    kind = dialect(request)
    rid = request_id(request)
    headers = {"x-request-id": rid, "request-id": rid, "x-should-retry": "true" if error.retryable else "false"}
    if error.retry_after is not None:
        headers["retry-after"] = str(int(error.retry_after))
    return JSONResponse(error_body(kind, error, rid), status_code=status_for(kind, error), headers=headers)
