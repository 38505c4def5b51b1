"""Memory estimator formulas (measured against real peak memory by bench/memory.py)."""

from __future__ import annotations

import pytest

from service.catalog import estimate
from service.catalog.memory import KV_STEP, bits_per_weight


def test_kv_per_token_qwen3_8b(builtin):
    # 2 (K,V) x 36 layers x 8 KV heads x 128 head_dim x 2 bytes (bf16)
    est = estimate(builtin.resolve("qwen3:8b"), context=32768)
    assert est.kv_bytes_per_token == 2 * 36 * 8 * 128 * 2
    assert est.kv_cache == est.kv_bytes_per_token * 32768  # 32768 is a multiple of the 256-token step


def test_kv_rounds_up_to_allocation_step(builtin):
    entry = builtin.resolve("qwen3:8b")
    assert estimate(entry, context=1).kv_cache == estimate(entry, context=KV_STEP).kv_cache
    assert estimate(entry, context=KV_STEP + 1).kv_cache == 2 * estimate(entry, context=KV_STEP).kv_cache


def test_sliding_window_layers_are_capped(builtin):
    entry = builtin.resolve("gpt-oss:20b")  # 12 full + 12 sliding (window 128) layers, 8 KV heads x 64
    full_per_token = 12 * 2 * 8 * 64 * 2
    est = estimate(entry, context=131072)
    assert est.kv_bytes_per_token == full_per_token
    window = 12 * 2 * 8 * 64 * 2 * KV_STEP  # the 128-token window still allocates one 256-token step
    assert est.kv_cache == full_per_token * 131072 + window


def test_moe_weights_count_all_experts(builtin):
    entry = builtin.resolve("qwen3:30b-a3b-4bit")
    assert estimate(entry).weights == int(30.5e9 * 4.5 / 8)


def test_effective_bits(builtin):
    q = builtin.resolve("qwen3:8b-4bit").quantization
    assert bits_per_weight(q) == 4.5
    assert bits_per_weight(builtin.resolve("qwen3:8b-8bit").quantization) == 8.5
    assert bits_per_weight(builtin.resolve("gpt-oss:20b").quantization) == 4.25


def test_parallel_and_quantized_kv(builtin):
    entry = builtin.resolve("llama3.1:8b")
    one = estimate(entry, context=8192)
    two = estimate(entry, context=8192, parallel=2)
    assert two.kv_cache == 2 * one.kv_cache and two.weights == one.weights
    q8 = estimate(entry, context=8192, kv_bits=8)
    assert abs(q8.kv_cache / one.kv_cache - 8.5 / 16) < 1e-6


def test_fused_attention_drops_the_score_matrix(builtin):
    entry = builtin.resolve("llama3.1:8b")
    fused = estimate(entry, context=8192, fused_attention=True)
    unfused = estimate(entry, context=8192, fused_attention=False)
    # the last prefill chunk of an 8191-token prompt: 2046 queries x 8190 keys, 32 heads, bf16 + a bool mask
    per_token = 4 * 14336 * 2 + 9 * 4096 * 4  # MLP intermediates (bf16) + hidden temporaries (fp32)
    assert unfused.activations == 2046 * per_token + (32 * 2 + 1) * 2046 * 8190 + 128256 * 4
    assert fused.activations == 2048 * per_token + 128256 * 4  # then the largest chunk wins


def test_last_layer_and_sliding_windows_bound_the_scores(builtin):
    from service.catalog.memory import activation_bytes

    gemma = builtin.resolve("gemma3:4b").model  # 5 sliding (window 1024) : 1 full, 34 layers
    short, long = activation_bytes(gemma, 8192, 2, False), activation_bytes(gemma, 32768, 2, False)
    assert long > short  # full-attention layers (not only the last) see every cached token


def test_checkpoint_size_wins_over_formula(write):
    from service.catalog import load_catalog

    from .conftest import VALID_FAMILY

    text = VALID_FAMILY.replace("mode: affine", "mode: affine\n          size_bytes: 600000000")
    entry = load_catalog([write(text)]).raise_for_problems().resolve("testfam")
    assert estimate(entry).weights == 600_000_000
    assert estimate(entry).total == estimate(entry).weights + estimate(entry).kv_cache + estimate(entry).activations


@pytest.mark.parametrize("tag", ["qwen3:8b", "qwen3:0.6b", "qwen3:30b-a3b", "gemma3-text:1b"])
def test_fit_parallel_is_the_largest_batch_the_estimator_fits(builtin, tag):
    from service.catalog.memory import fit_parallel

    entry = builtin.resolve(tag)
    for budget_gb in (1, 12, 40, 400):
        budget = budget_gb * 2**30
        fitted = fit_parallel(entry, 8192, budget, 32, 8)
        direct = estimate(entry, context=8192, parallel=fitted.parallel, prefill_parallel=8)
        assert fitted == direct
        assert fitted.parallel == 1 or fitted.total <= budget
        if fitted.parallel < 32:  # one more sequence would not fit
            assert estimate(entry, context=8192, parallel=fitted.parallel + 1, prefill_parallel=8).total > budget


@pytest.mark.parametrize("tag", ["gemma3:4b", "demo-whisper", "demo-vl"])
def test_serial_kinds_plan_for_one_request(builtin, tag):
    """Vision and speech runners take one request at a time: no batch to plan for."""
    from service.catalog.memory import fit_parallel

    assert fit_parallel(builtin.resolve(tag), 8192, 400 * 2**30, 32, 8).parallel == 1


def test_kind_estimates_count_what_each_runner_holds(builtin):
    embed = estimate(builtin.resolve("bge:large"))
    assert embed.kv_cache == 0 and embed.parallel == 32  # an encoder: a batch of inputs, no cache
    speech = estimate(builtin.resolve("demo-whisper"))
    assert speech.activations > 1500 * 1500 * 2 * 4  # the encoder's attention over a 30 s window
    vision = builtin.resolve("gemma3:4b")
    small, large = estimate(vision, image_pixels=448 * 448), estimate(vision, image_pixels=896 * 896)
    assert large.activations > small.activations and large.weights == small.weights
