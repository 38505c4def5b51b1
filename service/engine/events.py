"""What a runner answers with: a stream of typed events that ends with exactly one `Done`.

Errors are not events: a runner's iterator raises a `ServiceError`, before the first event (an ordinary error
response) or later (the dialect puts it in the stream)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Union


class FinishReason(str, Enum):
    STOP = "stop"  # the model ended its turn (end-of-sequence or the prompt style's stop string)
    STOP_SEQUENCE = "stop_sequence"  # one of the request's own stop strings
    LENGTH = "length"  # max_tokens
    TOOL_CALLS = "tool_calls"  # the turn ended with tool calls
    CANCELLED = "cancelled"  # the client went away


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache


@dataclass(frozen=True)
class Timings:
    """Seconds, measured by the runner. `queued`: waiting for a place in the batch; `prompt`: from admission
    to the first token (templating, tokenizing, prefill); `decode`: first to last token."""

    queued: float = 0.0
    prompt: float = 0.0
    decode: float = 0.0

    @property
    def total(self) -> float:
        return self.queued + self.prompt + self.decode


@dataclass(frozen=True)
class Done:
    finish_reason: FinishReason
    usage: Usage = Usage()
    timings: Timings = Timings()
    stop_sequence: str | None = None  # which of the request's stop strings ended it


Event = Union[TextDelta, ThinkingDelta, ToolCall, Done]


@dataclass
class Result:
    """A whole generation, gathered from its events (the non-streaming responses)."""

    text: str = ""
    thinking: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    done: Done | None = None

    def add(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self.text += event.text
        elif isinstance(event, ThinkingDelta):
            self.thinking += event.text
        elif isinstance(event, ToolCall):
            self.tool_calls.append(event)
        else:
            self.done = event
