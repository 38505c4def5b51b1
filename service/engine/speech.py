"""Transcription requests and results: what the OpenAI audio endpoints translate into."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TranscriptionJob:
    """`samples`: mono float32 audio at 16 kHz (decoded by `engine.audio`). `task`: transcribe, or translate
    into English."""

    samples: Any
    task: str = "transcribe"
    language: str | None = None
    prompt: str | None = None
    temperature: float = 0.0
    word_timestamps: bool = False
    cancel: threading.Event = field(default_factory=threading.Event, compare=False)  # the client went away

    @property
    def duration(self) -> float:
        return len(self.samples) / 16_000


@dataclass(frozen=True)
class Segment:
    id: int
    start: float
    end: float
    text: str
    tokens: tuple[int, ...] = ()
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    no_speech_prob: float = 0.0
    temperature: float = 0.0
    words: tuple[dict, ...] = ()


@dataclass(frozen=True)
class Transcript:
    text: str
    language: str
    duration: float
    segments: list[Segment] = field(default_factory=list)
    seconds: float = 0.0  # what decoding took
