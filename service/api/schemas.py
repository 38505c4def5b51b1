"""Response bodies as `/openapi.json` documents them, per dialect, with the errors each route can answer.

Documentation only: routes build their bodies as plain dicts (one JSON encoding, no model pass per response), and
`tests/test_openapi_fuzz.py` checks that what they send conforms to these models. Every model allows extra
fields: the peers' clients ignore what they do not know, and so may readers of this document."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .errors import ANTHROPIC, OLLAMA, OPENAI


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


# ---- errors -----------------------------------------------------------------------------------------------
class OpenAIErrorDetail(_Open):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIError(_Open):
    error: OpenAIErrorDetail


class AnthropicErrorDetail(_Open):
    type: str
    message: str


class AnthropicError(_Open):
    type: Literal["error"]
    error: AnthropicErrorDetail
    request_id: str | None = None


class OllamaError(_Open):
    error: str


_ERRORS = {OPENAI: OpenAIError, ANTHROPIC: AnthropicError, OLLAMA: OllamaError}
_STATUSES = {400: "Bad request: a field is missing, malformed or out of range", 401: "Missing or wrong API key",
             404: "No such model (or file)", 413: "Body, image or audio too large",
             500: "The model failed to load or run", 502: "The Hub sent something that cannot be trusted",
             503: "The model's queue is full: retry later", 504: "Generation timed out",
             507: "The model does not fit the memory budget"}


# ---- OpenAI -----------------------------------------------------------------------------------------------
class OpenAIUsage(_Open):
    prompt_tokens: int
    completion_tokens: int = 0
    total_tokens: int
    prompt_tokens_details: dict[str, int] | None = None


class FunctionCall(_Open):
    name: str
    arguments: str


class OpenAIToolCall(_Open):
    id: str
    type: Literal["function"]
    function: FunctionCall


class AssistantMessage(_Open):
    role: Literal["assistant"]
    content: str | None
    refusal: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[OpenAIToolCall] | None = None


class ChatChoice(_Open):
    index: int
    message: AssistantMessage
    finish_reason: str | None


class ChatCompletion(_Open):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: OpenAIUsage


class TextChoice(_Open):
    index: int
    text: str
    finish_reason: str | None


class TextCompletion(_Open):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[TextChoice]
    usage: OpenAIUsage


class Embedding(_Open):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str  # str: base64 of little-endian float32


class EmbeddingList(_Open):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: OpenAIUsage


class ModelObject(_Open):
    id: str
    object: Literal["model"]
    created: int | None = None
    owned_by: str | None = None
    capabilities: list[str] | None = None


class ModelList(_Open):
    object: Literal["list"]
    data: list[ModelObject]


class LoadedModel(ModelObject):
    active_requests: int
    waiting_requests: int
    batch_size: int
    memory_bytes: int
    load_seconds: float
    estimate_bytes: int | None = None
    runner: dict[str, Any]


class LoadedList(_Open):
    object: Literal["list"]
    data: list[LoadedModel]


class LoadAnswer(_Open):
    id: str
    object: Literal["model"]
    loaded: bool
    unloaded: bool | None = None


class Transcription(_Open):
    text: str
    usage: dict[str, Any] | None = None
    segments: list[dict[str, Any]] | None = None
    words: list[dict[str, Any]] | None = None


# ---- Anthropic --------------------------------------------------------------------------------------------
class AnthropicUsage(_Open):
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int | None = None


class AnthropicMessage(_Open):
    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[dict[str, Any]]  # text, thinking and tool_use blocks
    stop_reason: str | None
    stop_sequence: str | None
    usage: AnthropicUsage


class TokenCount(_Open):
    input_tokens: int


# ---- Ollama -----------------------------------------------------------------------------------------------
class OllamaMessage(_Open):
    role: Literal["assistant"]
    content: str
    thinking: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class OllamaDone(_Open):
    model: str
    created_at: str
    done: bool
    done_reason: str | None = None
    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None
    prompt_eval_duration: int | None = None
    eval_count: int | None = None
    eval_duration: int | None = None


class OllamaChat(OllamaDone):
    message: OllamaMessage


class OllamaGenerate(OllamaDone):
    response: str
    thinking: str | None = None


class OllamaEmbed(_Open):
    model: str
    embeddings: list[list[float]]
    total_duration: int
    load_duration: int
    prompt_eval_count: int


class OllamaEmbedding(_Open):
    embedding: list[float]


class Version(_Open):
    version: str


class LocalModel(_Open):
    name: str
    model: str
    size: int
    digest: str
    details: dict[str, Any]
    modified_at: str | None = None
    expires_at: str | None = None
    size_vram: int | None = None
    context_length: int | None = None


class LocalModels(_Open):
    models: list[LocalModel]


class Show(_Open):
    license: str
    modelfile: str
    parameters: str
    template: str
    details: dict[str, Any]
    model_info: dict[str, Any]
    capabilities: list[str]


class PullStatus(_Open):
    status: str


# ---- operations -------------------------------------------------------------------------------------------
class Stats(_Open):
    process: dict[str, Any]
    models: list[dict[str, Any]]
    pulls: list[dict[str, Any]]


class Events(_Open):
    events: list[dict[str, Any]]


class EngineConfig(_Open):
    settings: dict[str, Any]
    rebuilding: list[str]


class Cleared(_Open):
    cleared: bool


class Cancelled(_Open):
    cancelled: bool


SSE, NDJSON = ("text/event-stream",), ("application/x-ndjson",)
_STREAMED = {"text/event-stream": {"type": "object", "required": ["data"],  # each server-sent event
                                   "properties": {"event": {"type": "string"}, "data": {"type": "string"}}},
             "application/x-ndjson": {"type": "object"}}  # each line: a chunk, the final one, or {"error": ...}


# ---- the `responses=` of a route ----------------------------------------------------------------------------
def documented(dialect: str, ok: type[BaseModel] | None = None, also: tuple[str, ...] = ()) -> dict:
    """A route's documented answers: `ok` as JSON, `also` the media types of its other forms (streamed, plain
    text), and the errors of its dialect."""
    ok_answer: dict = {"description": "Success"}
    if ok is not None:  # FastAPI documents it as application/json, nested models under components
        ok_answer["model"] = ok
    if also:
        ok_answer["content"] = {media: {"schema": _STREAMED.get(media, {"type": "string"})} for media in also}
    answers: dict = {200: ok_answer}
    error = _ERRORS[dialect]
    answers |= {status: {"model": error, "description": why} for status, why in _STATUSES.items()}
    if dialect == ANTHROPIC:
        answers[529] = {"model": error, "description": "Overloaded: retry later"}
    return answers
