"""Structured output as a grammar: a JSON answer, a forced tool call, a reasoning budget.

The engine decides *what* the output must match and checks it compiles (an invalid schema is a 400 before any
model is touched); the runner compiles it against its tokenizer, where markers that are single special tokens
(`<tool_call>`, `</think>`, Harmony's channel tokens) become token references (`lit`). Grammars are llguidance's
Lark dialect with `%json{schema}` atoms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import BadRequest
from .request import Tool
from .toolformats import Harmony, Lit, ToolFormat, json_rule, quoted

ANY_TEXT = r"/(?s:.*)/"


@dataclass(frozen=True)
class Constraint:
    """`schema`: the answer is JSON (an empty dict: any JSON object); `calls`: tools whose calls are allowed
    (`forced`: a call is the only answer); `think_*`: the reasoning that may come first, `budget` tokens at most."""

    schema: dict | None = None
    calls: tuple[Tool, ...] = ()
    forced: bool = False
    tool_format: ToolFormat | None = None
    think_start: str | None = None
    think_end: str | None = None
    budget: int | None = None

    def lark(self, lit: Lit, opened: bool = False, think: bool = True) -> str:
        """The grammar. `opened`: the prompt already opened the reasoning; `think`: reasoning may come first
        (the runner says no when the end marker is not one token, where free text could not tell it apart)."""
        harmony = isinstance(self.tool_format, Harmony)
        rules, prefix = [], ""
        if think and self.think_start and self.think_end:
            rules.append(f"think_text{f'[max_tokens={self.budget}]' if self.budget else ''}: {ANY_TEXT}")
            close = lit(self.think_end) + (f' {lit("<|start|>")} "assistant"' if harmony else r' /\n{0,2}/')
            prefix = f"think_text {close}" if opened else f"({lit(self.think_start)} think_text {close})?"
        answers = []
        if self.schema is not None:
            answers.append((f'{lit("<|channel|>")} "final" {lit("<|message|>")} ' if harmony else "")
                           + json_rule(self.schema or {"type": "object"}))
        calls = [self.tool_format.grammar(t, lit) for t in self.calls] if self.tool_format else []
        if calls:
            rules.append("call: " + " | ".join(f"({c})" for c in calls))
            answers.append("call" if self.forced or self.schema is not None else f"{ANY_TEXT} (call {ANY_TEXT})*")
        elif self.schema is None:
            answers.append(ANY_TEXT)
        body = answers[0] if len(answers) == 1 else "(" + " | ".join(answers) + ")"
        return "\n".join([f"start: {prefix} {body}".replace("  ", " ")] + rules)


def check(constraint: Constraint) -> None:
    """A 400 naming the problem when the grammar does not compile (an unsupported or invalid schema)."""
    from llguidance import LLMatcher

    grammar = LLMatcher.grammar_from_lark(constraint.lark(quoted))
    failed, messages = LLMatcher.validate_grammar_with_warnings(grammar)
    if failed:
        raise BadRequest(f"the schema cannot be enforced: {_first_line(messages[0])}")


def _first_line(message: str) -> str:
    """llguidance's message without the grammar listing and position it quotes."""
    line = message.strip().splitlines()[0] if message.strip() else message
    return re.sub(r"^at \d+\(\d+\): ", "", line)[:500]
