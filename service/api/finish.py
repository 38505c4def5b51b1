"""How each dialect names the end of a generation: one table, covering every internal reason."""

from __future__ import annotations

from ..engine.events import FinishReason

# internal reason -> (OpenAI finish_reason, Anthropic stop_reason, Ollama done_reason)
_NAMES = {
    FinishReason.STOP: ("stop", "end_turn", "stop"),
    FinishReason.STOP_SEQUENCE: ("stop", "stop_sequence", "stop"),
    FinishReason.LENGTH: ("length", "max_tokens", "length"),
    FinishReason.TOOL_CALLS: ("tool_calls", "tool_use", "stop"),
    FinishReason.CANCELLED: ("stop", "end_turn", "stop"),  # nobody is left to read it
}


def openai(reason: FinishReason) -> str:
    return _NAMES[reason][0]


def anthropic(reason: FinishReason) -> str:
    return _NAMES[reason][1]


def ollama(reason: FinishReason) -> str:
    return _NAMES[reason][2]
