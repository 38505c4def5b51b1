"""The embedding runner: encoder (BERT-style) and decoder-based (Qwen3-Embedding) models through mlx-vlm's
embedding loader, which mlx-vlm's own `/v1/embeddings` uses too. All inputs of a request go through the model
together, padded, in batches of `BATCH`; the catalog says how token states are pooled and normalised."""

from __future__ import annotations

import time

import mlx.core as mx
from mlx.utils import tree_flatten

from ..engine.embed import EmbeddingJob, EmbeddingResult
from ..errors import BadRequest
from .base import LoadSpec
from .worker import SerialRunner

BATCH = 32  # inputs per forward pass: bounds the padded activations of a long list


class EmbeddingRunner(SerialRunner):
    def __init__(self, spec: LoadSpec):
        super().__init__(spec)
        self.model = self.tokenizer = None
        self.dimensions = 0
        self._counts.update(inputs=0, tokens=0)

    def _load(self) -> None:
        from mlx_vlm.embedding_loader import load_embedding_model
        from transformers import AutoTokenizer

        self.model = load_embedding_model(self.spec.path)
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.spec.path))
        self.memory_bytes = sum(v.nbytes for _, v in tree_flatten(self.model.parameters()))
        probe = self._forward([[self.tokenizer.pad_token_id or 0]])
        self.dimensions = probe.shape[-1]

    @property
    def max_length(self) -> int:
        limit = getattr(self.tokenizer, "model_max_length", None) or 512
        return min(int(limit) if limit < 10**9 else 512, self.spec.context_length or 10**9)

    async def embed(self, job: EmbeddingJob) -> EmbeddingResult:
        if job.dimensions is not None and job.dimensions != self.dimensions:
            matryoshka = self.spec.embedding is not None and self.spec.embedding.matryoshka
            if not matryoshka or job.dimensions > self.dimensions:
                raise BadRequest(f"{self.name} gives {self.dimensions}-dimensional vectors"
                                 + (" and cannot shorten them (it is not a Matryoshka model)" if not matryoshka
                                    else f": dimensions must be at most {self.dimensions}"), param="dimensions")
        return await self.worker.run(lambda: self._embed(job))

    def _embed(self, job: EmbeddingJob) -> EmbeddingResult:
        started = time.perf_counter()
        ids = self._token_ids(job)
        vectors, tokens = [], 0
        for at in range(0, len(ids), BATCH):
            batch = ids[at:at + BATCH]
            tokens += sum(len(x) for x in batch)
            pooled = self._forward(batch)
            if job.dimensions is not None and job.dimensions < pooled.shape[-1]:
                pooled = pooled[:, : job.dimensions]
                if self.spec.embedding is None or self.spec.embedding.normalize:
                    pooled = pooled / mx.maximum(mx.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)
            vectors += pooled.astype(mx.float32).tolist()
        self._counts["finished"] += 1
        self._counts["inputs"] += len(ids)
        self._counts["tokens"] += tokens
        return EmbeddingResult(vectors, tokens, time.perf_counter() - started)

    def _token_ids(self, job: EmbeddingJob) -> list[list[int]]:
        limit = self.max_length
        if job.texts:
            ids = [list(x) for x in self.tokenizer(list(job.texts), add_special_tokens=True)["input_ids"]]
        else:
            vocab = len(self.tokenizer)
            for i, row in enumerate(job.token_ids):
                if any(t < 0 or t >= vocab for t in row):
                    raise BadRequest(f"input[{i}] holds token ids outside this model's vocabulary of {vocab}",
                                     param="input")
            ids = [list(row) for row in job.token_ids]
        for i, row in enumerate(ids):
            if len(row) > limit:
                if not job.truncate:
                    raise BadRequest(f"input[{i}] is {len(row)} tokens, more than the {limit} {self.name} reads: "
                                     "shorten it (or let it be truncated)", param="input")
                ids[i] = row[:limit]
        return ids

    def _forward(self, batch: list[list[int]]) -> mx.array:
        """Pooled vectors of a batch, padded on the right (real tokens never see the pads)."""
        width = max(len(row) for row in batch)
        pad = self.tokenizer.pad_token_id or 0
        ids = mx.array([row + [pad] * (width - len(row)) for row in batch])
        mask = mx.array([[1] * len(row) + [0] * (width - len(row)) for row in batch])
        out = self.model(ids, attention_mask=mask)
        spec = self.spec.embedding
        if spec is None or spec.pooling == "checkpoint":  # its own pipeline: 1_Pooling, dense layers, normalising
            return out.text_embeds
        pooled = _pool(out.last_hidden_state, mask, spec.pooling)
        if spec.normalize:
            pooled = pooled / mx.maximum(mx.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)
        return pooled

    def _release(self) -> None:
        self.model = self.tokenizer = None


open_runner = EmbeddingRunner.open


def _pool(states: mx.array, mask: mx.array, how: str) -> mx.array:
    if how == "cls":
        return states[:, 0]
    if how == "last":  # the last real token of each row (right padding)
        last = mask.sum(axis=1) - 1
        return mx.take_along_axis(states, last[:, None, None].astype(mx.int32), axis=1)[:, 0]
    weights = mask[..., None].astype(states.dtype)
    return (states * weights).sum(axis=1) / mx.maximum(weights.sum(axis=1), 1)
