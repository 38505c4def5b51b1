"""The internal request/response model every API dialect translates to and from."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..catalog.model import Sampling as CatalogSampling


@dataclass
class Message:
    role: str  # system | user | assistant | tool
    content: str


@dataclass(frozen=True)
class Sampling(CatalogSampling):
    """Request sampling; None means: the catalog family's default, else the engine's."""

    seed: int | None = None


@dataclass
class GenerationRequest:
    model: str
    messages: list[Message] | None = None  # chat; else `prompt` is used as is
    prompt: str | None = None
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    sampling: Sampling = field(default_factory=Sampling)
    keep_alive: float | None = None  # seconds; None = leave the model's current setting
    ignore_eos: bool = False  # generate exactly max_tokens (benchmarks); as vLLM's `ignore_eos`


@dataclass
class Completion:
    """The outcome of one generation. `finish_reason`: stop | length | stop_sequence | cancelled."""

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    stop_sequence: str | None = None
    cached_tokens: int = 0
    prompt_seconds: float = 0.0
    decode_seconds: float = 0.0
    total_seconds: float = 0.0
