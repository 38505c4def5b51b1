"""Vision, embeddings and speech through MLX Service against the same libraries called in process, on generated
models (bench/catalog/: a BERT encoder, a Qwen2-VL, a Whisper-tiny shape), in interleaved rounds.

- embeddings: inputs per second at batch 1 and batch 32 (inputs of ~60 tokens), `POST /v1/embeddings` against
  mlx-vlm's embedding model called directly (tokenize, forward, pool); target >= 0.90x;
- vision: time to the first token of a one-image request (448x448 PNG sent as a data URL, max_tokens 1), the
  service against `mlx_vlm.stream_generate`'s first result; target: within 10 ms;
- speech: 30 s of audio transcribed, `POST /v1/audio/transcriptions` (multipart WAV) against mlx-audio's
  `generate` on the same samples and options; the ratio of speeds; target >= 0.95x.
Each round times every case a few times (8 single embeddings, 2 of the others) on each side, in alternating
order; medians of per-round ratios (differences for vision) with 95% bootstrap intervals.
Run: `make bench` or `.venv/bin/python bench/kinds.py [--rounds N]`.
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import statistics
import sys
import time
import wave
from pathlib import Path

import httpx
import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _report import RESULTS, build, table, update_readme, write  # noqa: E402
from serve import interval, start_service  # noqa: E402

EMBED, VISION, SPEECH = "bench-bert:small-f32", "bench-vl:small-f32", "bench-whisper:tiny-f16"
WORDS = "the river of light runs over stone and the small cat reads a long answer about memory and time".split()


def texts(n: int) -> list[str]:
    return [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(50)) for i in range(n)]


def png() -> bytes:
    from PIL import Image

    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (448, 448, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def wav(seconds: float) -> tuple[bytes, np.ndarray]:
    t = np.arange(int(16_000 * seconds)) / 16_000
    samples = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16_000)
        w.writeframes((samples * 32767).astype(np.int16).tobytes())
    return buf.getvalue(), samples


class InProcess:
    """The libraries themselves, as a user would call them (the baseline)."""

    def __init__(self):
        import mlx.core as mx
        import mlx_vlm
        from mlx_audio.stt.utils import load_model
        from mlx_vlm.embedding_loader import load_embedding_model
        from transformers import AutoTokenizer

        folder = lambda tag: build(tag, lambda e: RESULTS / "models" / e.tag.replace(":", "-"))[1]  # noqa: E731
        self.mx = mx
        self.embedder = load_embedding_model(folder(EMBED))
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder(EMBED)))
        self.vlm, self.processor = mlx_vlm.load(str(folder(VISION)))
        self.whisper = load_model(folder(SPEECH))

    def embed(self, batch: list[str]) -> float:
        mx = self.mx
        start = time.perf_counter()
        enc = self.tokenizer(batch, padding=True, return_tensors="np")
        out = self.embedder(mx.array(enc["input_ids"]), attention_mask=mx.array(enc["attention_mask"]))
        h, m = out.last_hidden_state, mx.array(enc["attention_mask"])[..., None]
        pooled = (h * m).sum(axis=1) / m.sum(axis=1)
        pooled = pooled / mx.linalg.norm(pooled, axis=-1, keepdims=True)
        pooled.tolist()
        return time.perf_counter() - start

    def first_token(self, image: bytes) -> float:
        import mlx_vlm
        from PIL import Image

        start = time.perf_counter()
        picture = Image.open(io.BytesIO(image)).convert("RGB")
        prompt = self.processor.tokenizer.apply_chat_template(
            [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe."}]}],
            add_generation_prompt=True, tokenize=False)
        next(iter(mlx_vlm.stream_generate(self.vlm, self.processor, prompt, image=[picture], max_tokens=1)))
        return time.perf_counter() - start

    def transcribe(self, samples: np.ndarray) -> float:
        start = time.perf_counter()
        self.whisper.generate(samples, temperature=0.0, condition_on_previous_text=False, return_timestamps=True)
        return time.perf_counter() - start


class Service:
    def __init__(self, url: str):
        self.client = httpx.Client(base_url=url, timeout=600)

    def embed(self, batch: list[str]) -> float:
        start = time.perf_counter()
        r = self.client.post("/v1/embeddings", json={"model": EMBED, "input": batch})
        r.raise_for_status()
        return time.perf_counter() - start

    def first_token(self, image: bytes) -> float:
        url = "data:image/png;base64," + base64.b64encode(image).decode()
        body = {"model": VISION, "max_tokens": 1, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Describe."}]}]}
        start = time.perf_counter()
        self.client.post("/v1/chat/completions", json=body).raise_for_status()
        return time.perf_counter() - start

    def transcribe(self, audio: bytes) -> float:
        start = time.perf_counter()
        r = self.client.post("/v1/audio/transcriptions", files={"file": ("a.wav", audio)}, data={"model": SPEECH})
        r.raise_for_status()
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLX_SERVICE_MAX_LOADED_MODELS": "3"}  # all three stay loaded
    proc, url = start_service(EMBED, RESULTS / "models-kinds", env)
    try:
        ours, raw = Service(url), InProcess()
        image, (audio, samples) = png(), wav(30.0)
        one, many = texts(1), texts(32)
        cases = {"embed-1": (lambda: ours.embed(one), lambda: raw.embed(one)),
                 "embed-32": (lambda: ours.embed(many), lambda: raw.embed(many)),
                 "vision-ttft": (lambda: ours.first_token(image), lambda: raw.first_token(image)),
                 "speech-30s": (lambda: ours.transcribe(audio), lambda: raw.transcribe(samples))}
        for service, baseline in cases.values():  # loads, builds, compiles: not measured
            service(), baseline()
        times = {name: {"ours": [], "raw": []} for name in cases}
        repeats = {"embed-1": 8, "embed-32": 2, "vision-ttft": 2, "speech-30s": 1}  # calls per round: the mean
        for r in range(args.rounds):
            for name, (service, baseline) in cases.items():
                pair = [("ours", service), ("raw", baseline)]
                for who, run in (pair if r % 2 else pair[::-1]):
                    times[name][who].append(statistics.mean(run() for _ in range(repeats[name])))
    finally:
        proc.terminate()
        proc.wait(timeout=60)

    rows = []
    for name, t in times.items():
        ours_s, raw_s = statistics.median(t["ours"]), statistics.median(t["raw"])
        if name == "vision-ttft":
            diffs = [(a - b) * 1000 for a, b in zip(t["ours"], t["raw"])]
            rows.append({"case": name, "ours": f"{ours_s * 1000:.1f} ms", "in_process": f"{raw_s * 1000:.1f} ms",
                         "result": f"{statistics.median(diffs):+.1f} ms {interval(diffs, 1)}", "target": "<= +10 ms"})
            continue
        ratios = [b / a for a, b in zip(t["ours"], t["raw"])]  # speed of ours / speed of the library
        unit = 32 if name == "embed-32" else 1
        shown = (lambda s: f"{unit / s:.1f} inputs/s") if name.startswith("embed") else (lambda s: f"{30 / s:.1f}x RT")
        rows.append({"case": name, "ours": shown(ours_s), "in_process": shown(raw_s),
                     "result": f"{statistics.median(ratios):.3f}x {interval(ratios, 3)}",
                     "target": ">= 0.90x" if name.startswith("embed") else ">= 0.95x"})
    text = table(rows, ["case", "ours", "in_process", "result", "target"])
    text += f"\n\n{args.rounds} interleaved rounds; models {EMBED}, {VISION}, {SPEECH} (generated)"
    print(text)
    path = write("kinds", {"rows": rows, "times": times})
    print(f"\nwrote {path.relative_to(ROOT)}")
    update_readme("bench/kinds.py", text)


if __name__ == "__main__":
    main()
