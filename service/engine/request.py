"""The one internal request every API dialect translates its body into."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..catalog.model import Sampling as CatalogSampling
from .events import ToolCall


@dataclass(frozen=True)
class Image:
    """An image in a message: its file's bytes, or a URL the server fetches before the job runs."""

    data: bytes | None = None
    url: str | None = None


@dataclass(frozen=True)
class Message:
    role: str  # system | user | assistant | tool
    content: str
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant turn's calls
    tool_call_id: str | None = None  # a tool result: the call it answers
    name: str | None = None  # a tool result: the tool's name
    thinking: str | None = None  # an assistant turn's reasoning
    images: tuple[Image, ...] = ()  # shown to the model before the message's text


@dataclass(frozen=True)
class Tool:
    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass(frozen=True)
class ToolChoice:
    """`auto`: the model decides; `none`: no calls; `required`: at least one call; `named`: a call of `name`."""

    mode: str = "auto"
    name: str | None = None

    @property
    def forced(self) -> bool:
        return self.mode in ("required", "named")


@dataclass(frozen=True)
class ResponseFormat:
    """Structured output: any JSON object (`schema` None) or JSON that follows `schema`."""

    schema: dict[str, Any] | None = None


@dataclass(frozen=True)
class Thinking:
    """What the request said about reasoning. `enabled` None: the model's default. `budget`: most tokens of
    reasoning (Anthropic's budget_tokens); `effort`: low | medium | high (OpenAI's reasoning_effort, Ollama's
    think level), passed to templates that know it."""

    enabled: bool | None = None
    budget: int | None = None
    effort: str | None = None


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
    tools: list[Tool] = field(default_factory=list)
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    parallel_tool_calls: bool = True
    response_format: ResponseFormat | None = None
    thinking: Thinking = field(default_factory=Thinking)
