"""Memory estimate of serving one checkpoint: weights + KV cache + prefill activations.

Formulas follow mlx-lm's runtime (see docs/ARCHITECTURE.md and bench/memory.py, which measures them):
- weights: the checkpoint's bytes when known, else parameters x effective bits (scales/biases included);
  MoE keeps every expert resident.
- KV cache: 2 (K and V) x KV heads x head_dim x element size per attention layer and token (multi-head latent
  attention: the latent plus the rotary key part); sliding-window layers hold at most the window; linear-attention
  (Gated DeltaNet) and Mamba layers keep a fixed state per sequence: a convolution window in the model's dtype
  and a float32 recurrent state. mlx-lm grows caches in steps of 256 tokens, so tokens are rounded up to that
  step.
- activations: the largest prefill chunk (mlx-lm: 2048 tokens): its hidden states and MLP intermediates and,
  unless attention is fused (Metal), the chunk x keys attention scores (see activation_bytes).
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, replace

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
        else:
            total += state_bytes(model, kind, element_bytes)
    return int(total), int(per_token)


def state_bytes(model: Model, kind: str, element_bytes: float) -> int:
    """The fixed state of one linear-attention or Mamba layer for one sequence (0 when its facts are absent)."""
    linear, mamba = model.architecture.linear_attention, model.architecture.mamba
    channels = _conv_channels(model.architecture, kind)
    if kind == "linear_attention" and linear is not None:
        recurrent = linear.value_heads * linear.value_head_dim * linear.key_head_dim * 4
        return int((linear.conv_kernel - 1) * channels * element_bytes + recurrent)
    if kind == "mamba" and mamba is not None:
        recurrent = mamba.heads * mamba.head_dim * mamba.state_size * 4
        return int((mamba.conv_kernel - 1) * channels * element_bytes + recurrent)
    return 0


def _prefill_chunks(prompt: int):
    """(chunk size, tokens in the cache after it) for each step of mlx-lm's chunked prefill."""
    done = 0
    while prompt - done > 1:
        chunk = min(PREFILL_STEP, prompt - done - 1)
        done += chunk
        yield chunk, done


def activation_bytes(model: Model, context: int, element_bytes: int, fused_attention: bool) -> int:
    """Peak scratch while prefilling a `context`-token prompt (one sequence), chunk by chunk.

    Per chunk of c tokens with T tokens cached: MLP intermediates (4 x MLP width, model dtype; GELU MLPs
    one more, float32) and hidden-state temporaries (9 x hidden, float32) per token; and, unless attention
    is fused, the c x keys score matrix (one per attention layer at a time) plus its boolean mask. The last
    layer's attention output is never evaluated during prefill (only its K/V are kept), so it does not
    count; sliding-window layers see at most window - 1 + c keys, and their rotating caches briefly hold
    that many. Multi-head latent attention computes its rotary scores apart and hands them to attention as a
    mask: one more c x keys matrix, fused or not.

    Linear-attention and Mamba layers keep their convolution state as a slice of the chunk's convolution input,
    which keeps that whole input alive until the next chunk: c x channels per layer. Mamba's SSD prefill works
    in 256-token steps whose per-head 256 x 256 matrices peak at about twelve alive (measured, bench/memory.py).
    """
    arch = model.architecture
    mlp = (arch.moe_intermediate_size or arch.intermediate_size or 4 * arch.hidden_size) * (
        arch.num_experts_per_tok if arch.is_moe else 1)
    per_token = 4 * mlp * element_bytes + 9 * arch.hidden_size * 4
    if (arch.hidden_act or "").startswith("gelu"):  # the tanh-approximated GELU keeps one more MLP-wide array
        per_token += mlp * 4
    evaluated = set(arch.layer_types[:-1])
    kv_per_layer_token = 2 * arch.num_key_value_heads * arch.effective_head_dim * element_bytes
    sliding_layers = arch.layer_types.count("sliding_attention")
    window = arch.sliding_window or context
    state_layers = [t for t in arch.layer_types if t in ("linear_attention", "mamba")]
    per_token += sum(_conv_channels(arch, t) for t in state_layers) * element_bytes
    ssd = 12 * arch.mamba.heads * SSD_STEP**2 * 4 if arch.mamba and "mamba" in state_layers else 0
    peak = 0
    for chunk, cached in _prefill_chunks(max(context - 1, 2)):
        sliding_keys = min(cached, window - 1 + chunk)
        keys = cached if "full_attention" in evaluated else sliding_keys if "sliding_attention" in evaluated else 0
        scores = 0 if fused_attention else arch.num_attention_heads * chunk * keys * element_bytes + chunk * keys
        if arch.kv_lora_rank and keys:  # MLA: the rotary part's scores, computed apart, are attention's mask
            scores += arch.num_attention_heads * chunk * keys * element_bytes
        rotating = sliding_layers * kv_per_layer_token * max(sliding_keys - window, 0)
        peak = max(peak, chunk * per_token + scores + rotating + (ssd * min(chunk, SSD_STEP) ** 2) // SSD_STEP**2)
    return int(peak + arch.vocab_size * 4)


SSD_STEP = 256  # mlx-lm's Mamba prefill step (ssm_attn)


def _conv_channels(arch, kind: str) -> int:
    """Channels of a linear-attention or Mamba layer's short convolution (0 when its facts are absent)."""
    linear, mamba = arch.linear_attention, arch.mamba
    if kind == "linear_attention" and linear:
        return 2 * linear.key_heads * linear.key_head_dim + linear.value_heads * linear.value_head_dim
    if kind == "mamba" and mamba:
        return mamba.heads * mamba.head_dim + 2 * mamba.groups * mamba.state_size
    return 0


EMBED_BATCH = 32  # inputs the embedding runner passes through the model at once
AUDIO_WINDOW = 30 * 16_000  # samples Whisper encodes at once
IMAGE_PIXELS = 1024 * 1024  # the image a vision estimate plans for, unless the checkpoint caps it (max_pixels)


def _extra(model: Model, key: str, default=None):
    return dict(model.architecture.extra_config).get(key, default)


def _embedding_estimate(entry: Entry, context: int) -> MemoryEstimate:
    """An encoder: no KV cache; one forward pass of EMBED_BATCH inputs of `context` tokens, layer by layer:
    MLP and hidden-state temporaries per token, and each input's full attention scores."""
    model, arch = entry.model, entry.model.architecture
    element = _ELEMENT_BYTES[compute_dtype(model, entry.quantization)]
    tokens = min(context, arch.max_position_embeddings or context)
    mlp = arch.intermediate_size or 4 * arch.hidden_size
    per_token = 4 * mlp * element + 6 * arch.hidden_size * 4
    activations = EMBED_BATCH * (tokens * per_token + arch.num_attention_heads * tokens * tokens * 4)
    weights = entry.quantization.size_bytes or int(model.parameters * bits_per_weight(entry.quantization) / 8)
    return MemoryEstimate(int(weights), 0, int(activations), tokens, EMBED_BATCH, 0, compute_dtype(
        model, entry.quantization))


def _speech_estimate(entry: Entry) -> MemoryEstimate:
    """Whisper (mlx-audio builds it in float16): the encoder's pass over one 30 s window (its frames' full
    attention and MLP), the spectrogram's scratch, and the decoder's small self- and cross-attention caches."""
    model, quant = entry.model, entry.quantization
    frames = _extra(model, "n_audio_ctx", 1500)
    state = _extra(model, "n_audio_state", model.architecture.hidden_size)
    heads = _extra(model, "n_audio_head", model.architecture.num_attention_heads)
    text_ctx, text_state = _extra(model, "n_text_ctx", 448), _extra(model, "n_text_state", state)
    bits = 16 if quant.mode in _ELEMENT_BYTES else bits_per_weight(quant)
    weights = quant.size_bytes if quant.mode not in _ELEMENT_BYTES and quant.size_bytes else \
        int(model.parameters * bits / 8)
    encoder = heads * frames * frames * 4 + frames * 8 * state * 2 + AUDIO_WINDOW * 4 * 5
    caches = _extra(model, "n_text_layer", 4) * 2 * (frames + text_ctx // 8) * text_state * 2
    return MemoryEstimate(int(weights), int(caches), int(encoder), frames, 1, 0, "float16")


def _vision_tower(model: Model, element: int, pixels: int) -> int:
    """One image through the vision tower: its patches' full attention scores (one layer's at a time) and
    per-patch temporaries (the pixels, MLP and hidden states)."""
    vision = _extra(model, "vision_config", {}) or {}
    patch = vision.get("patch_size", 14)
    patches = max(pixels // (patch * patch), 1)
    width = vision.get("embed_dim", vision.get("hidden_size", 1024))
    heads = vision.get("num_heads", vision.get("num_attention_heads", 16))
    mlp = int(width * vision.get("mlp_ratio", 4)) if "mlp_ratio" in vision else vision.get("intermediate_size",
                                                                                            4 * width)
    pixels_in = 3 * vision.get("temporal_patch_size", 2) * patch * patch * 4
    return int(heads * patches * patches * 4 + patches * (pixels_in + 2 * mlp * 4 + 6 * width * element))


def estimate(entry: Entry, context: int | None = None, parallel: int = 1, kv_bits: int | None = None,
             fused_attention: bool | None = None, prefill_parallel: int | None = None,
             image_pixels: int | None = None) -> MemoryEstimate:
    """Memory to serve `entry` with `parallel` sequences of `context` tokens (default: the family's context).

    Every sequence holds its own KV cache; prefill activations grow only with the sequences prefilled together
    (`prefill_parallel`, default all of them), since a batch prefills a few newcomers at a time.

    `fused_attention` defaults to the platform: MLX's Metal backend fuses attention, the CPU backend does not.
    """
    model, quant = entry.model, entry.quantization
    context = context or entry.context_length
    if entry.family.kind == "embedding":
        return _embedding_estimate(entry, context)
    if entry.family.kind == "speech":
        return _speech_estimate(entry)
    fused = sys.platform == "darwin" if fused_attention is None else fused_attention
    dtype = compute_dtype(model, quant)
    element = _ELEMENT_BYTES[dtype]
    kv_element = element * ((kv_bits + 0.5) / (8 * element)) if kv_bits else element
    weights = quant.size_bytes or int(model.parameters * bits_per_weight(quant) / 8)
    kv_one, per_token = kv_bytes(model, context, kv_element)
    activations = activation_bytes(model, context, element, fused)
    if entry.family.kind == "vision":  # the image's tower pass, whose features the prompt's prefill then holds
        activations += _vision_tower(model, element, image_pixels or _extra(model, "max_pixels", IMAGE_PIXELS))
    return MemoryEstimate(
        weights=int(weights),
        kv_cache=kv_one * parallel,
        activations=activations * min(parallel, prefill_parallel or parallel),
        context=context,
        parallel=parallel,
        kv_bytes_per_token=per_token,
        dtype=dtype,
    )


def fit_parallel(entry: Entry, context: int, budget: float, most: int, prefill_parallel: int) -> MemoryEstimate:
    """The estimate for the most sequences, up to `most` and at least one, that fit `budget`. An estimate is
    linear in its sequences (a KV cache each, activations for up to `prefill_parallel` of them), so the estimate
    of one sequence answers for every batch size."""
    one = estimate(entry, context=context)
    if entry.family.kind != "text":  # the other runners take one request at a time
        return one

    def scaled(parallel: int) -> MemoryEstimate:
        return replace(one, kv_cache=one.kv_cache * parallel, parallel=parallel,
                       activations=one.activations * min(parallel, prefill_parallel))

    return next((e for e in map(scaled, range(most, 1, -1)) if e.total <= budget), one)
