"""Embedding requests and results: what the OpenAI and Ollama embedding endpoints translate into."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EmbeddingJob:
    """`texts` or `token_ids` (one of them), embedded in one pass. `truncate`: cut inputs longer than the model
    reads (else refused); `dimensions`: a shorter vector, for models trained for it (Matryoshka)."""

    texts: tuple[str, ...] = ()
    token_ids: tuple[tuple[int, ...], ...] = ()
    truncate: bool = True
    dimensions: int | None = None

    @property
    def count(self) -> int:
        return len(self.texts) or len(self.token_ids)


@dataclass(frozen=True)
class EmbeddingResult:
    vectors: list[list[float]]
    prompt_tokens: int
    seconds: float  # the forward passes, as the runner measured them
