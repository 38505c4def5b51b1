"""Embeddings for the OpenAI and Ollama routes: the input checked once, the model's kind checked, one lease."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Request

from ..engine.embed import EmbeddingJob, EmbeddingResult
from ..errors import BadRequest
from ..manager import require_kind
from .common import number

MAX_INPUTS = 2048  # per request, as OpenAI's API


@dataclass
class Embedded:
    model: str  # the name the model is served under
    result: EmbeddingResult
    load_seconds: float


def embedding_job(value: Any, *, truncate: bool = True, dimensions: Any = None, where: str = "input") -> EmbeddingJob:
    """A string, a list of strings, a list of token ids, or a list of lists of token ids."""
    if dimensions is not None:
        dimensions = number(dimensions, "dimensions", 1, 65536, integer=True)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise BadRequest(f"{where} must be a string or a non-empty list", param=where)
    if len(value) > MAX_INPUTS:
        raise BadRequest(f"{where} holds {len(value)} items; at most {MAX_INPUTS} per request", param=where)
    if all(isinstance(v, str) for v in value):
        if any(not v for v in value):
            raise BadRequest(f"{where} must not contain empty strings", param=where)
        return EmbeddingJob(texts=tuple(value), truncate=truncate, dimensions=dimensions)
    if all(_is_id(v) for v in value):
        value = [value]
    if all(isinstance(v, list) and v and all(_is_id(t) for t in v) for v in value):
        return EmbeddingJob(token_ids=tuple(tuple(v) for v in value), truncate=truncate, dimensions=dimensions)
    raise BadRequest(f"{where} must be a string, a list of strings, or token ids (a list of integers, or a list of "
                     "such lists)", param=where)


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


async def embed(request: Request, model: str, job: EmbeddingJob, keep_alive: float | None) -> Embedded:
    manager = request.app.state.manager
    target = manager.resolve(model)
    require_kind(target, {"embedding"}, "embed text: use an embedding model")
    async with await manager.lease(model, keep_alive, target=target) as lease:
        result = await lease.served.runner.embed(job)
        lease.served.usage.finished(result.prompt_tokens, 0, 0, None, 0.0)
        load = lease.served.load_seconds if lease.waited_for_load else 0.0
        return Embedded(lease.served.name, result, load)
