"""Memory estimate of serving one checkpoint: weights + KV cache + prefill activations.

Formulas follow mlx-lm's runtime (see docs/ARCHITECTURE.md and bench/memory.py, which measures them):
- weights: the checkpoint's bytes when known, else parameters x effective bits (scales/biases included);
  MoE keeps every expert resident.
- KV cache: 2 (K and V) x KV heads x head_dim x element size per attention layer and token; sliding-window
  layers hold at most the window; linear-attention/SSM layers keep a fixed state and are left out. mlx-lm grows
  caches in steps of 256 tokens, so tokens are rounded up to that step.
- activations: the prefill of one chunk (mlx-lm: 2048 tokens) holds the chunk's hidden states and MLP
  intermediates, and - unless attention is fused (Metal) - the chunk x context attention scores.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass

from .model import Entry, Model, Quantization

KV_STEP = 256
PREFILL_STEP = 2048
_EFFECTIVE_BITS = {"mxfp4": 4.25, "mxfp8": 8.25, "nvfp4": 4.5, "bfloat16": 16, "float16": 16, "float32": 32}
_ELEMENT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def bits_per_weight(quant: Quantization) -> float:
    """Storage bits per weight, counting the per-group scale and bias (16-bit each) of affine quantization."""
    if quant.mode == "affine":
        return quant.bits + 32 / (quant.group_size or 64)
    return _EFFECTIVE_BITS[quant.mode]


def compute_dtype(model: Model, quant: Quantization) -> str:
    """Activations and KV use the unquantized dtype: the quantization's own, else the source model's."""
    if quant.mode in _ELEMENT_BYTES:
        return quant.mode
    return model.architecture.torch_dtype or "bfloat16"


@dataclass(frozen=True)
class MemoryEstimate:
    weights: int
    kv_cache: int
    activations: int
    context: int
    parallel: int
    kv_bytes_per_token: int
    dtype: str

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.activations

    def as_dict(self) -> dict:
        return {**asdict(self), "total": self.total}


def _round_up(n: int, step: int) -> int:
    return -(-n // step) * step


def kv_bytes(model: Model, tokens: int, element_bytes: float) -> tuple[int, int]:
    """(bytes for `tokens` tokens of one sequence, bytes per token of the growing layers)."""
    arch = model.architecture
    per_layer_token = 2 * arch.num_key_value_heads * arch.effective_head_dim * element_bytes
    if arch.kv_lora_rank:  # MLA keeps the compressed latent plus the rotary key part
        per_layer_token = (arch.kv_lora_rank + (arch.qk_rope_head_dim or 0)) * element_bytes
    allocated = _round_up(max(tokens, 1), KV_STEP)
    total = per_token = 0.0
    for kind in arch.layer_types:
        if kind == "full_attention":
            total += per_layer_token * allocated
            per_token += per_layer_token
        elif kind == "sliding_attention":
            total += per_layer_token * min(allocated, _round_up(arch.sliding_window or tokens, KV_STEP))
    return int(total), int(per_token)


def activation_bytes(model: Model, context: int, element_bytes: int, fused_attention: bool) -> int:
    """Peak scratch while prefilling the last chunk of a `context`-token prompt (one sequence)."""
    arch = model.architecture
    chunk = min(context, PREFILL_STEP)
    width = arch.hidden_size + 2 * arch.num_attention_heads * arch.effective_head_dim
    mlp = (arch.intermediate_size or 4 * arch.hidden_size) * max(arch.num_experts_per_tok or 1, 1)
    hidden = chunk * (2 * width + 3 * mlp) * element_bytes
    scores = 0 if fused_attention else 2 * arch.num_attention_heads * chunk * context * element_bytes
    logits = arch.vocab_size * 4
    return int(hidden + scores + logits)


def estimate(entry: Entry, context: int | None = None, parallel: int = 1, kv_bits: int | None = None,
             fused_attention: bool | None = None) -> MemoryEstimate:
    """Memory to serve `entry` with `parallel` sequences of `context` tokens (default: the family's context).

    `fused_attention` defaults to the platform: MLX's Metal backend fuses attention, the CPU backend does not.
    """
    model, quant = entry.model, entry.quantization
    context = context or entry.context_length
    fused = sys.platform == "darwin" if fused_attention is None else fused_attention
    dtype = compute_dtype(model, quant)
    element = _ELEMENT_BYTES[dtype]
    kv_element = element * ((kv_bits + 0.5) / (8 * element)) if kv_bits else element
    weights = quant.size_bytes or int(model.parameters * bits_per_weight(quant) / 8)
    kv_one, per_token = kv_bytes(model, context, kv_element)
    activations = activation_bytes(model, context, element, fused)
    return MemoryEstimate(
        weights=int(weights),
        kv_cache=kv_one * parallel,
        activations=activations * parallel,
        context=context,
        parallel=parallel,
        kv_bytes_per_token=per_token,
        dtype=dtype,
    )
