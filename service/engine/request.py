"""The one internal request every API dialect translates its body into."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..catalog.model import Sampling as CatalogSampling


@dataclass(frozen=True)
class Message:
    role: str  # system | user | assistant | tool
    content: str


@dataclass(frozen=True)
class Sampling(CatalogSampling):
    """What the request asked for; None means: not said (the catalog family's default, else the engine's)."""

    seed: int | None = None


@dataclass
class GenerationRequest:
    model: str
    messages: list[Message] | None = None  # chat; else `prompt` is used as is
    prompt: str | None = None
    max_tokens: int | None = None  # None: the engine's cap (MLX_SERVICE_MAX_TOKENS)
    stop: list[str] = field(default_factory=list)
    sampling: Sampling = field(default_factory=Sampling)
    keep_alive: float | None = None  # seconds; None = leave the model's current setting
    ignore_eos: bool = False  # generate exactly max_tokens (benchmarks); as vLLM's `ignore_eos`
    stream: bool = False
