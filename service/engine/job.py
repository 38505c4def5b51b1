"""A fully resolved job: everything a runner needs, decided once, so that runners and dialects never re-derive
sampling, limits, deadlines, templates or what the output may hold."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..catalog.model import Family, PromptStyle
from ..catalog.model import Sampling as CatalogSampling
from ..errors import BadRequest
from .grammar import Constraint, check
from .output import OutputSpec
from .request import GenerationRequest, Image, Message
from .toolformats import Harmony, ToolFormat, tool_format

# The engine's own defaults, used where neither the request nor the catalog family says anything.
ENGINE_SAMPLING = CatalogSampling(temperature=0.7, top_p=1.0, top_k=0, min_p=0.0, repetition_penalty=1.0)


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


@dataclass(frozen=True)
class ModelTraits:
    """What the catalog says a model can do and how it writes, from its family and prompt style. A model
    outside the catalog chats and completes, and nothing more is assumed of it."""

    name: str
    abilities: frozenset[str] = frozenset({"chat", "generate"})
    kind: str = "text"
    sampling: CatalogSampling = CatalogSampling()
    think_start: str | None = None
    think_end: str | None = None
    tool_format: ToolFormat | None = None

    @classmethod
    def of(cls, name: str, family: Family, style: PromptStyle | None) -> ModelTraits:
        fmt = style.tool_calls if style else None
        thinking = style.thinking if style and "thinking" in family.abilities else None
        return cls(name, frozenset(family.abilities), family.kind, family.sampling,
                   thinking.start if thinking else None, thinking.end if thinking else None,
                   tool_format(fmt.format, fmt.start, fmt.end) if fmt and "tools" in family.abilities else None)


@dataclass(frozen=True)
class ChatPrompt:
    """The arguments of `apply_chat_template`: messages in Hugging Face's shape, tool definitions, and the
    switches templates read (`enable_thinking` for Qwen3, `reasoning_effort` for gpt-oss, ...)."""

    messages: tuple[dict, ...]
    tools: tuple[dict, ...] | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Job:
    chat: ChatPrompt | None
    prompt: str | None
    sampling: SamplingParams
    max_tokens: int
    stop: tuple[str, ...]
    deadline: float  # time.monotonic() after which the job is stopped with a timeout
    timeout: float  # the limit it came from, for the error message
    ignore_eos: bool = False
    max_tokens_given: bool = False  # the request set it (else it may shrink to what the context has room for)
    images: tuple[Image, ...] = ()  # every message's images, in order (fetched and checked before the job runs)
    output: OutputSpec = field(default_factory=OutputSpec)
    constraint: Constraint | None = None  # a grammar the output must follow, enforced token by token
    cancel: threading.Event = field(default_factory=threading.Event)  # set when the client goes away

    def fit(self, prompt: int, context: int) -> None:
        """The prompt (`prompt` tokens, images included) and the answer must fit the `context` the model is
        served with (0: unchecked): refused before any prefill, or, when the request did not set max_tokens,
        the answer shortened to the room left."""
        if not context:
            return
        room = context - prompt
        fix = "shorten the conversation, or raise MLX_SERVICE_CONTEXT_LENGTH (up to the model's own context)"
        if room < 1:
            raise BadRequest(f"the prompt is {prompt} tokens, more than the {context} tokens of context this model "
                             f"is served with: {fix}")
        if self.max_tokens > room:
            if self.max_tokens_given:
                raise BadRequest(f"the prompt ({prompt} tokens) and max_tokens ({self.max_tokens}) need "
                                 f"{prompt + self.max_tokens} tokens, more than the {context} tokens of context "
                                 f"this model is served with: lower max_tokens, {fix}", param="max_tokens")
            self.max_tokens = room

    def start(self) -> Job:
        """Start the generation clock (the time a model load took does not count)."""
        self.deadline = time.monotonic() + self.timeout
        return self


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


def build_job(req: GenerationRequest, traits: ModelTraits, *, max_tokens: int, timeout: float) -> Job:
    """`max_tokens`: the engine's cap, applied here and nowhere else; `timeout`: seconds from now. Whatever the
    model cannot do is refused here (400), before it runs."""
    if req.messages is None and req.prompt is None:
        raise BadRequest("a job needs messages or a prompt")
    limit = max_tokens if req.max_tokens is None else min(req.max_tokens, max_tokens)
    if limit < 1:
        raise BadRequest("max_tokens must be at least 1", param="max_tokens")
    calling = _check_tools(req, traits)
    thinks = _check_thinking(req, traits)
    images = tuple(image for m in req.messages or () for image in m.images)
    if images and "vision" not in traits.abilities:
        raise BadRequest(f'"{traits.name}" is a {traits.kind} model: it cannot see images; send them to a vision '
                         "model", param="messages")
    fmt = traits.tool_format
    output = OutputSpec(think_start=traits.think_start, think_end=traits.think_end,
                        keep_thinking=req.thinking.enabled is not False,
                        tool_format=fmt if calling or isinstance(fmt, Harmony) else None,
                        tools=tuple(req.tools) if calling else (), parallel_tool_calls=req.parallel_tool_calls)
    constraint = _constraint(req, traits, calling, thinks)
    if constraint is not None:
        if req.ignore_eos:
            raise BadRequest("ignore_eos cannot be combined with structured output, a forced tool call or a "
                             "thinking budget: the grammar ends the reply", param="ignore_eos")
        check(constraint)
    chat = _chat(req, calling) if req.messages is not None else None
    return Job(chat=chat, prompt=req.prompt if chat is None else None,
               sampling=merge_sampling(traits.sampling, req.sampling), max_tokens=limit,
               stop=tuple(s for s in req.stop if s), deadline=time.monotonic() + timeout, timeout=timeout,
               ignore_eos=req.ignore_eos, max_tokens_given=req.max_tokens is not None, images=images,
               output=output, constraint=constraint)


def _check_tools(req: GenerationRequest, traits: ModelTraits) -> bool:
    """Whether tools are offered to the model (given, and tool_choice is not none)."""
    choice = req.tool_choice
    if choice.mode == "none":
        return False
    if not req.tools:
        if choice.forced:
            raise BadRequest(f"tool_choice {choice.mode!r} needs tools", param="tool_choice")
        return False
    if traits.tool_format is None:
        raise BadRequest(f'"{traits.name}" does not support tools', param="tools")
    if req.messages is None:
        raise BadRequest("tools need a chat request (messages), not a raw prompt", param="tools")
    if choice.mode == "named" and choice.name not in {t.name for t in req.tools}:
        raise BadRequest(f"tool_choice names {choice.name!r}, which is not one of the tools given",
                         param="tool_choice")
    return True


def _check_thinking(req: GenerationRequest, traits: ModelTraits) -> bool:
    """Whether the model may reason before it answers."""
    thinking = req.thinking
    if thinking.enabled and traits.think_start is None:
        raise BadRequest(f'"{traits.name}" does not support thinking', param="thinking")
    return traits.think_start is not None and thinking.enabled is not False


def _constraint(req: GenerationRequest, traits: ModelTraits, calling: bool, thinks: bool) -> Constraint | None:
    fmt = req.response_format
    forced = calling and req.tool_choice.forced
    budget = req.thinking.budget if thinks and req.thinking.enabled else None
    if fmt is None and not forced and budget is None:
        return None
    tools = [t for t in req.tools if req.tool_choice.mode != "named" or t.name == req.tool_choice.name]
    return Constraint(schema=None if fmt is None else (fmt.schema or {}), calls=tuple(tools) if calling else (),
                      forced=forced, tool_format=traits.tool_format if calling else None,
                      think_start=traits.think_start if thinks else None,
                      think_end=traits.think_end if thinks else None, budget=budget)


def _chat(req: GenerationRequest, calling: bool) -> ChatPrompt:
    kwargs: dict[str, Any] = {}
    if req.thinking.enabled is not None:
        kwargs["enable_thinking"] = kwargs["thinking"] = req.thinking.enabled
    if req.thinking.effort:
        kwargs["reasoning_effort"] = req.thinking.effort
    tools = tuple({"type": "function", "function": {"name": t.name, "description": t.description,
                                                    "parameters": t.parameters}} for t in req.tools)
    return ChatPrompt(tuple(_template_message(m) for m in req.messages or ()), tools if calling else None, kwargs)


def _template_message(m: Message) -> dict:
    """A message as chat templates read it: tool calls with their arguments as an object (templates write them
    with `tojson`), a tool result with its call id and tool name, reasoning as `reasoning_content`."""
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.images:  # the parts vision templates expect: one per image, then the text
        out["content"] = [{"type": "image"} for _ in m.images] + [{"type": "text", "text": m.content}]
    if m.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.name, "arguments": _arguments(c.arguments)}}
                             for c in m.tool_calls]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    if m.name is not None:
        out["name"] = m.name
    if m.thinking:
        out["reasoning_content"] = out["thinking"] = m.thinking
    return out


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
