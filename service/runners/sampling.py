"""Samplers shared by the generating runners: greedy, plain, seeded (position-keyed, so batching does not change
the draws), and one that never picks the end-of-sequence tokens (`ignore_eos`)."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p, greedy_sampler, make_sampler

from ..engine.job import SamplingParams


def sampler_for(params: SamplingParams):
    """Greedy jobs share one sampler, so the batch samples them in one call."""
    if params.greedy:
        return greedy_sampler
    if params.seed is None:
        return make_sampler(temp=params.temperature, top_p=params.top_p, min_p=params.min_p, top_k=params.top_k)
    return _Seeded(params)


class _Seeded:
    """A seeded sampler. Draw n uses a key made from (seed, n) alone, so the output does not depend on what
    else is in the batch, and a draw that was never used (generate_step runs a step ahead) can be taken back."""

    def __init__(self, params: SamplingParams):
        self.seed, self.temperature, self.draws = params.seed, params.temperature, 0
        self.filters = []
        if 0 < params.top_p < 1.0:
            self.filters.append(lambda x: apply_top_p(x, params.top_p))
        if params.min_p != 0.0:
            self.filters.append(lambda x: apply_min_p(x, params.min_p))
        if params.top_k > 0:
            self.filters.append(lambda x: apply_top_k(x, params.top_k))

    def __call__(self, logprobs):
        key = mx.random.key(hash((self.seed, self.draws)) & 0x7FFF_FFFF_FFFF_FFFF)  # ints hash the same everywhere
        self.draws += 1
        for keep in self.filters:
            logprobs = keep(logprobs)
        return mx.random.categorical(logprobs * (1 / self.temperature), key=key)

    def rewind(self) -> None:
        self.draws -= 1


def banning(token_ids: list[int], sampler):
    """`sampler`, never picking `token_ids` (to ignore end-of-sequence). Done in the sampler rather than as a
    logits processor: any processor sends the whole batch down mlx-lm's one-row-at-a-time path."""
    banned = mx.array(token_ids)
    masks: dict[int, object] = {}

    def sample(logprobs):
        vocab = logprobs.shape[-1]
        if vocab not in masks:
            masks[vocab] = mx.zeros((vocab,), dtype=mx.bool_).at[banned].add(True)
        return sampler(mx.where(masks[vocab], -mx.inf, logprobs))

    if hasattr(sampler, "rewind"):
        sample.rewind = sampler.rewind
    return sample
