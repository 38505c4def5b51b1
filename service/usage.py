"""What each loaded model has served: requests, tokens, time to first token and decode speed. The manager keeps
one per model; the API records each finished request once (never per token), and /api/stats and /metrics read
them."""

from __future__ import annotations

from dataclasses import dataclass, field

SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass
class Histogram:
    """Cumulative-free bucket counts (Prometheus adds them up at exposition), a sum and a count."""

    buckets: tuple[float, ...] = SECONDS_BUCKETS
    counts: list[int] = field(default_factory=lambda: [0] * (len(SECONDS_BUCKETS) + 1))
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        self.counts[next((i for i, edge in enumerate(self.buckets) if value <= edge), len(self.buckets))] += 1
        self.total += value
        self.count += 1


@dataclass
class ModelUsage:
    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    ttft_seconds: float = 0.0  # the last request's (the mean is the histogram's)
    decode_tps: float = 0.0  # the last request's
    decode_tokens: int = 0
    decode_seconds: float = 0.0
    ttft: Histogram = field(default_factory=Histogram)
    per_token: Histogram = field(default_factory=Histogram)  # time per output token after the first
    queued: Histogram = field(default_factory=Histogram)

    def finished(self, prompt: int, completion: int, cached: int, ttft: float | None, decode: float,
                 queued: float = 0.0) -> None:
        self.requests += 1
        self.queued.observe(queued)
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.cached_tokens += cached
        if ttft is not None:
            self.ttft_seconds = ttft
            self.ttft.observe(ttft)
        if completion > 1 and decode > 0:  # the first token belongs to the prompt's time
            self.decode_tps = (completion - 1) / decode
            self.decode_tokens += completion - 1
            self.decode_seconds += decode
            self.per_token.observe(decode / (completion - 1))

    def as_dict(self) -> dict:
        return {"requests": self.requests, "errors": self.errors, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "cached_tokens": self.cached_tokens,
                "ttft_seconds": {"last": round(self.ttft_seconds, 4),
                                 "mean": round(self.ttft.total / self.ttft.count, 4) if self.ttft.count else 0.0},
                "decode_tokens_per_second": {"last": round(self.decode_tps, 2), "mean": round(
                    self.decode_tokens / self.decode_seconds, 2) if self.decode_seconds else 0.0}}
