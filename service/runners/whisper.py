"""The speech-to-text runner: Whisper checkpoints through mlx-audio, one transcription at a time.

Audio is cut into 30 s windows here and each window is decoded on its own (not conditioned on the previous
window's text): decoding stays bounded by the audio's length, and one bad window cannot derail the rest."""

from __future__ import annotations

import asyncio
import time

from mlx.utils import tree_flatten

from ..engine.speech import Segment, Transcript, TranscriptionJob
from ..errors import LoadFailed
from .base import LoadSpec
from .worker import SerialRunner

WINDOW = 30 * 16_000  # samples


class WhisperRunner(SerialRunner):
    def __init__(self, spec: LoadSpec):
        super().__init__(spec)
        self.model = None
        self._counts.update(audio_seconds=0, windows=0)

    def _load(self) -> None:
        from mlx_audio.stt.utils import load_model

        self.model = load_model(self.spec.path)
        if getattr(self.model, "_processor", None) is None:  # mlx-audio only warns; fail the load instead
            raise LoadFailed(f"{self.name}: its tokenizer and feature extractor (WhisperProcessor) did not load")
        self.memory_bytes = sum(v.nbytes for _, v in tree_flatten(self.model.parameters()))

    async def transcribe(self, job: TranscriptionJob) -> Transcript:
        try:
            return await self.worker.run(lambda: self._transcribe(job))
        except asyncio.CancelledError:  # the client left (or the server is stopping): stop after this window
            job.cancel.set()
            raise

    def _transcribe(self, job: TranscriptionJob) -> Transcript:
        started = time.perf_counter()
        segments: list[Segment] = []
        language = job.language
        for at in range(0, len(job.samples), WINDOW):
            if job.cancel.is_set():
                break
            self._counts["windows"] += 1
            out = self.model.generate(job.samples[at:at + WINDOW], task=job.task, language=job.language,
                                      temperature=job.temperature, condition_on_previous_text=False,
                                      initial_prompt=job.prompt if at == 0 else None, return_timestamps=True,
                                      word_timestamps=job.word_timestamps, verbose=None)
            language = language or out.language
            offset = at / 16_000
            for raw in out.segments or []:
                segments.append(_segment(len(segments), raw, offset))
        text = " ".join(s.text.strip() for s in segments if s.text.strip())
        self._counts["finished"] += 1
        self._counts["audio_seconds"] += int(job.duration)
        return Transcript(text, language or "en", job.duration, segments, time.perf_counter() - started)

    def _release(self) -> None:
        self.model = None


open_runner = WhisperRunner.open


def _segment(index: int, raw: dict, offset: float) -> Segment:
    def at(value) -> float:
        return round(float(value or 0.0) + offset, 3)

    words = tuple({"word": w.get("word", ""), "start": at(w.get("start")), "end": at(w.get("end"))}
                  for w in raw.get("words") or ())
    return Segment(id=index, start=at(raw.get("start")), end=at(raw.get("end")), text=raw.get("text", ""),
                   tokens=tuple(raw.get("tokens") or ()), avg_logprob=float(raw.get("avg_logprob", 0.0)),
                   compression_ratio=float(raw.get("compression_ratio", 0.0)),
                   no_speech_prob=float(raw.get("no_speech_prob", 0.0)),
                   temperature=float(raw.get("temperature", 0.0)), words=words)
