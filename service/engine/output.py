"""Splitting a model's raw text into the answer, its reasoning and its tool calls, as it streams.

A runner feeds every piece of generated text through an `OutputSplitter` and sends what comes out. Markers (the
prompt style's thinking tags, tool-call tags, Harmony's channel tokens) never reach `content`: text that could
be the start of a marker is held back until the next piece decides it. A call is sent once it is complete, so a
client never sees half a call's markup; what fails to parse is sent as text rather than dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from .events import TextDelta, ThinkingDelta, ToolCall
from .request import Tool
from .toolformats import Harmony, ToolFormat

Piece = TextDelta | ThinkingDelta | ToolCall


@dataclass(frozen=True)
class OutputSpec:
    """What a job's output may hold, decided once from its prompt style and request."""

    think_start: str | None = None
    think_end: str | None = None
    keep_thinking: bool = True  # False: the request turned thinking off; stray reasoning is dropped
    tool_format: ToolFormat | None = None  # None: tool calls are not looked for (no tools, or tool_choice none)
    tools: tuple[Tool, ...] = ()
    parallel_tool_calls: bool = True

    def splitter(self, prompt_text: str = "") -> OutputSplitter:
        """`prompt_text`: the rendered prompt; a template that opens the reasoning itself ends with the
        thinking tag, so the output starts inside it."""
        if isinstance(self.tool_format, Harmony):
            return HarmonySplitter(self)
        opened = bool(self.think_start) and prompt_text.rstrip().endswith(self.think_start)
        return OutputSplitter(self, thinking=opened)


class _Scanner:
    """Cuts text into plain text and markers, holding back a tail that may be the start of a marker."""

    def __init__(self, markers: list[str]):
        self.markers = [m for m in markers if m]
        self.held = ""

    def feed(self, text: str) -> list[str | _Marker]:
        text, self.held = self.held + text, ""
        out: list[str | _Marker] = []
        while text:
            found = min(((text.find(m), -len(m), m) for m in self.markers if m in text), default=None)
            if found is None:
                break
            at, _, marker = found
            if at:
                out.append(text[:at])
            out.append(_Marker(marker))
            text = text[at + len(marker):]
        keep = max((k for m in self.markers for k in range(min(len(m) - 1, len(text)), 0, -1)
                    if text.endswith(m[:k])), default=0)
        if len(text) > keep:
            out.append(text[:len(text) - keep])
        self.held = text[len(text) - keep:] if keep else ""
        return out

    def flush(self) -> str:
        text, self.held = self.held, ""
        return text


class _Marker(str):
    pass


class _Splitter:
    """Feeds a scanner's items to `_item`; `_end` closes what is open when the output ends."""

    scanner: _Scanner
    calls = 0

    @property
    def called(self) -> bool:
        return self.calls > 0

    def feed(self, text: str) -> list[Piece]:
        out: list[Piece] = []
        for item in self.scanner.feed(text):
            self._item(item, out)
        return out

    def finish(self) -> list[Piece]:
        """The rest, at the end of the output."""
        out: list[Piece] = []
        tail = self.scanner.flush()
        if tail:
            self._item(tail, out)
        self._end(out)
        return out

    def _item(self, item: str, out: list[Piece]) -> None:
        raise NotImplementedError

    def _end(self, out: list[Piece]) -> None:
        raise NotImplementedError


class OutputSplitter(_Splitter):
    def __init__(self, spec: OutputSpec, thinking: bool = False):
        self.spec = spec
        fmt = spec.tool_format
        self.call_start = fmt.start if fmt else None
        self.call_end = fmt.end if fmt else None
        self.untagged = fmt is not None and fmt.start is None  # the call is the whole reply (Llama 3 JSON)
        self.scanner = _Scanner([spec.think_start or "", spec.think_end or "", self.call_start or "",
                                 self.call_end or ""])
        self.mode = "thinking" if thinking else "text"
        self.begun = False  # any answer text sent yet (leading whitespace is not sent)
        self.buffer = ""  # a call's text (or a whole untagged reply) until it is complete

    def _end(self, out: list[Piece]) -> None:
        """An open call is parsed as it stands (complete where the format has no end marker)."""
        if self.mode in ("call", "untagged"):
            self._close_call(out, complete=self.mode == "untagged" or self.call_end is None)

    def _item(self, item: str, out: list[Piece]) -> None:
        spec = self.spec
        if isinstance(item, _Marker):
            if self.mode == "thinking" and item == spec.think_end:
                self.mode, self.begun = "text", False
                return
            if self.mode == "text" and item == spec.think_start and not self.begun:
                self.mode = "thinking"
                return
            if self.mode == "text" and item == self.call_start:
                self.mode, self.buffer = "call", ""
                return
            if self.mode == "call" and item == self.call_end:
                self._close_call(out, complete=True)
                return
        if self.mode == "thinking":
            if spec.keep_thinking:
                out.append(ThinkingDelta(str(item)))
        elif self.mode in ("call", "untagged"):
            self.buffer += item
        else:
            self._text(str(item), out)

    def _text(self, text: str, out: list[Piece]) -> None:
        if not self.begun:
            text = text.lstrip()
            if not text:
                return
            if self.untagged and text[0] in "[{":  # an untagged format's call: wait for the whole reply
                self.mode, self.buffer = "untagged", text
                return
            self.begun = True
        out.append(TextDelta(text))

    def _close_call(self, out: list[Piece], complete: bool) -> None:
        fmt, body = self.spec.tool_format, self.buffer
        self.mode, self.buffer, self.begun = "text", "", False
        calls = fmt.parse(body, list(self.spec.tools)) if complete and fmt else None
        if not calls:  # not a call after all: nothing is lost
            markup = body if self.untagged else (self.call_start or "") + body + (
                self.call_end if complete and self.call_end else "")
            self.begun = True
            out.append(TextDelta(markup))
            return
        for call in calls:
            if self.calls and not self.spec.parallel_tool_calls:
                break
            self.calls += 1
            out.append(call)


class HarmonySplitter(_Splitter):
    """gpt-oss's Harmony output: `<|channel|>analysis<|message|>...<|end|>` is reasoning,
    `<|channel|>final<|message|>...` the answer, `<|channel|>commentary to=functions.X ...<|message|>{...}` a
    call; `<|start|>assistant` opens the next message. Text outside any channel is answer text."""

    MARKERS = ["<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|constrain|>", "<|call|>", "<|return|>"]

    def __init__(self, spec: OutputSpec):
        self.spec = spec
        self.scanner = _Scanner(self.MARKERS)
        self.mode = "body"  # header (after <|channel|>), role (after <|start|>), body
        self.channel = "final"
        self.header = ""
        self.buffer = ""
        self.begun = False

    def _item(self, item: str, out: list[Piece]) -> None:
        if isinstance(item, _Marker):
            if item == "<|channel|>":
                self.mode, self.header = "header", ""
            elif item == "<|message|>" and self.mode == "header":
                self.mode = "body"
                self.channel = "tool" if "to=" in self.header else self.header.split()[0] if self.header.split() \
                    else "final"
                self.buffer = ""
            elif item in ("<|end|>", "<|call|>", "<|return|>"):
                self._end(out)
            elif item == "<|start|>":
                self._end(out)
                self.mode = "role"
            elif self.mode == "header":
                self.header += item
            return
        if self.mode == "header":
            self.header += item
        elif self.mode == "body":
            if self.channel == "analysis":
                if self.spec.keep_thinking:
                    out.append(ThinkingDelta(item))
            elif self.channel == "tool":
                self.buffer += item
            else:
                if not self.begun:
                    item = item.lstrip()
                    self.begun = bool(item)
                if item:
                    out.append(TextDelta(item))

    def _end(self, out: list[Piece]) -> None:
        """The message in progress ends: a call in the commentary channel is parsed."""
        if self.mode == "body" and self.channel == "tool":
            fmt = self.spec.tool_format
            calls = fmt.parse(self.header + "<|message|>" + self.buffer, list(self.spec.tools)) if fmt else None
            if calls and (self.spec.parallel_tool_calls or not self.calls):
                self.calls += 1
                out.append(calls[0])
            elif not calls:
                out.append(TextDelta(self.buffer))
        self.mode, self.channel, self.buffer = "body", "final", ""
