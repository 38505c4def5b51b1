"""A fully resolved job: everything a runner needs, decided once, so that runners and dialects never re-derive
sampling, limits or deadlines."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..catalog.model import Sampling as CatalogSampling
from ..errors import BadRequest
from .request import GenerationRequest, Message

# The engine's own defaults, used where neither the request nor the catalog family says anything.
ENGINE_SAMPLING = CatalogSampling(temperature=0.7, top_p=1.0, top_k=0, min_p=0.0, repetition_penalty=1.0)

# A logits processor: (tokens so far, logits) -> logits. Structured output plugs in here.
LogitsProcessor = Callable[[Any, Any], Any]


@dataclass(frozen=True)
class SamplingParams:
    """Complete sampling settings: no field is left open."""

    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repetition_penalty: float
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class Job:
    messages: tuple[Message, ...] | None
    prompt: str | None
    sampling: SamplingParams
    max_tokens: int
    stop: tuple[str, ...]
    deadline: float  # time.monotonic() after which the job is stopped with a timeout
    timeout: float  # the limit it came from, for the error message
    ignore_eos: bool = False
    logits_processors: tuple[LogitsProcessor, ...] = ()
    cancel: threading.Event = field(default_factory=threading.Event)  # set when the client goes away


def merge_sampling(family: CatalogSampling, request: CatalogSampling) -> SamplingParams:
    """The one place sampling is decided: engine defaults, then the catalog family's, then the request's."""
    def pick(name: str):
        for source in (request, family):
            value = getattr(source, name)
            if value is not None:
                return value
        return getattr(ENGINE_SAMPLING, name)

    return SamplingParams(temperature=float(pick("temperature")), top_p=float(pick("top_p")),
                          top_k=int(pick("top_k")), min_p=float(pick("min_p")),
                          repetition_penalty=float(pick("repetition_penalty")),
                          seed=getattr(request, "seed", None))


def build_job(req: GenerationRequest, family: CatalogSampling, *, max_tokens: int, timeout: float) -> Job:
    """`max_tokens`: the engine's cap, applied here and nowhere else; `timeout`: seconds from now."""
    if req.messages is None and req.prompt is None:
        raise BadRequest("a job needs messages or a prompt")
    limit = max_tokens if req.max_tokens is None else min(req.max_tokens, max_tokens)
    if limit < 1:
        raise BadRequest("max_tokens must be at least 1", param="max_tokens")
    return Job(messages=tuple(req.messages) if req.messages is not None else None, prompt=req.prompt,
               sampling=merge_sampling(family, req.sampling), max_tokens=limit, stop=tuple(s for s in req.stop if s),
               deadline=time.monotonic() + timeout, timeout=timeout, ignore_eos=req.ignore_eos)
