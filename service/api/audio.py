"""OpenAI's audio endpoints: /v1/audio/transcriptions and /v1/audio/translations (multipart uploads)."""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from ..engine import audio
from ..engine.speech import Transcript, TranscriptionJob
from ..errors import BadRequest
from ..manager import require_kind
from .common import keep_alive, number, read_body
from .errors import OPENAI
from .schemas import Transcription, documented
from .stream import unless_disconnected

router = APIRouter()
FORMATS = ("json", "text", "srt", "verbose_json", "vtt")


async def _form(request: Request) -> dict:
    """The multipart form, its size limited while it streams in (MLX_SERVICE_MAX_AUDIO_BYTES)."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise BadRequest("send the audio as multipart/form-data with a `file` part and a `model` field")
    limit = request.app.state.settings.max_audio_bytes
    raw = await read_body(request, limit=limit, setting="MLX_SERVICE_MAX_AUDIO_BYTES")
    parser = MultiPartParser(request.headers, _once(raw), max_files=1, max_fields=32)
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise BadRequest(f"invalid multipart form: {exc.message}") from None
    fields: dict = {}
    for key, value in form.multi_items():
        fields.setdefault(key, []).append(value)
    return fields


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def _text(fields: dict, name: str, default: str | None = None) -> str | None:
    values = fields.get(name)
    if not values:
        return default
    if not isinstance(values[0], str):
        raise BadRequest(f"{name} must be a text field", param=name)
    return values[0]


async def _job(request: Request, task: str) -> tuple[str, TranscriptionJob, str, list[str], float | None]:
    fields = await _form(request)
    upload = (fields.get("file") or [None])[0]
    if not isinstance(upload, UploadFile):
        raise BadRequest("`file` is required: the audio to transcribe, as a file part", param="file")
    model = _text(fields, "model")
    if not model:
        raise BadRequest("`model` is required", param="model")
    fmt = _text(fields, "response_format", "json")
    if fmt not in FORMATS:
        raise BadRequest(f"response_format must be one of {', '.join(FORMATS)}", param="response_format")
    granularities = [g for g in fields.get("timestamp_granularities[]", []) + fields.get("timestamp_granularities", [])
                     if isinstance(g, str)]
    if any(g not in ("word", "segment") for g in granularities):
        raise BadRequest("timestamp_granularities holds word and/or segment", param="timestamp_granularities")
    temperature = _text(fields, "temperature")
    try:
        temperature = number(float(temperature), "temperature", 0, 1) if temperature is not None else 0.0
    except ValueError:
        raise BadRequest("temperature must be a number", param="temperature") from None
    data = await upload.read()
    samples = await asyncio.to_thread(audio.decode, data, upload.filename or "")
    language = _text(fields, "language")
    if language is not None and not (2 <= len(language) <= 8 and language.isalpha()):
        raise BadRequest("language must be an ISO-639-1 code such as `en`", param="language")
    job = TranscriptionJob(samples, task=task, language=language.lower() if language else None,
                           prompt=_text(fields, "prompt"), temperature=temperature,
                           word_timestamps="word" in granularities)
    return model, job, fmt, granularities, keep_alive(_text(fields, "keep_alive"))


async def _run(request: Request, task: str) -> Response:
    model, job, fmt, granularities, keep = await _job(request, task)
    manager = request.app.state.manager
    target = manager.resolve(model)
    require_kind(target, {"speech"}, "transcribe audio: use a speech-to-text model")
    async with await manager.lease(model, keep, target=target) as lease:
        transcript = await unless_disconnected(request, lease.served.runner.transcribe(job))
        if transcript is not None:
            lease.served.usage.finished(0, sum(len(s.tokens) for s in transcript.segments), 0, None, 0.0)
    if transcript is None:  # the client left: it stopped after the window it was decoding
        return Response(status_code=499)
    return _render(transcript, fmt, task, granularities)


def _render(t: Transcript, fmt: str, task: str, granularities: list[str]) -> Response:
    if fmt == "text":
        return PlainTextResponse(t.text + "\n")
    if fmt in ("srt", "vtt"):
        return PlainTextResponse(_subtitles(t, fmt), media_type="text/vtt" if fmt == "vtt" else "text/plain")
    if fmt == "json":
        return JSONResponse({"text": t.text, "usage": {"type": "duration", "seconds": round(t.duration)}})
    body = {"task": "translate" if task == "translate" else "transcribe", "language": t.language,
            "duration": round(t.duration, 3), "text": t.text}
    if not granularities or "segment" in granularities:
        body["segments"] = [{"id": s.id, "seek": int(s.start * 100), "start": s.start, "end": s.end, "text": s.text,
                             "tokens": list(s.tokens), "temperature": s.temperature, "avg_logprob": s.avg_logprob,
                             "compression_ratio": s.compression_ratio, "no_speech_prob": s.no_speech_prob}
                            for s in t.segments]
    if "word" in granularities:
        body["words"] = [w for s in t.segments for w in s.words]
    return JSONResponse(body)


def _subtitles(t: Transcript, fmt: str) -> str:
    def stamp(seconds: float) -> str:
        ms = int(round(seconds * 1000))
        h, ms = divmod(ms, 3_600_000)
        m, ms = divmod(ms, 60_000)
        s, ms = divmod(ms, 1000)
        return f"{h:02}:{m:02}:{s:02}{',' if fmt == 'srt' else '.'}{ms:03}"

    cues = [f"{stamp(s.start)} --> {stamp(s.end)}\n{s.text.strip()}\n" for s in t.segments]
    if fmt == "srt":
        return "\n".join(f"{i}\n{cue}" for i, cue in enumerate(cues, start=1))
    return "WEBVTT\n\n" + "\n".join(cues)


MULTIPART = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file", "model"],
    "properties": {"file": {"type": "string", "format": "binary"}, "model": {"type": "string"},
                   "language": {"type": "string"}, "prompt": {"type": "string"},
                   "temperature": {"type": "number", "minimum": 0, "maximum": 1},
                   "response_format": {"type": "string", "enum": list(FORMATS)},
                   "timestamp_granularities[]": {"type": "array", "items": {"type": "string",
                                                                           "enum": ["word", "segment"]}}}}}}}}


@router.post("/v1/audio/transcriptions", openapi_extra=MULTIPART,
             responses=documented(OPENAI, Transcription, ("text/plain", "text/vtt")))
async def transcriptions(request: Request):
    return await _run(request, "transcribe")


@router.post("/v1/audio/translations", openapi_extra=MULTIPART,
             responses=documented(OPENAI, Transcription, ("text/plain", "text/vtt")))
async def translations(request: Request):
    """Into English: the same decoding, with Whisper's translate task."""
    return await _run(request, "translate")
