"""Type detection rules against real config.json shapes (tests/fixtures/configs)."""

from __future__ import annotations

import json

import pytest

from service.catalog import UndetectableModel

from .conftest import FIXTURES

EXPECTED = {
    # fixture: (kind, loader, moe, rule)
    "llama-3.1-8b": ("text", "mlx-lm", False, "causal-lm"),
    "qwen2.5-7b-4bit": ("text", "mlx-lm", False, "causal-lm"),
    "qwen3-8b": ("text", "mlx-lm", False, "causal-lm"),
    "qwen3-30b-a3b": ("text", "mlx-lm", True, "causal-lm"),
    "mixtral-8x7b": ("text", "mlx-lm", True, "causal-lm"),
    "gpt-oss-20b": ("text", "mlx-lm", True, "causal-lm"),
    "deepseek-v3": ("text", "mlx-lm", True, "causal-lm"),
    "phi-4-mini": ("text", "mlx-lm", False, "causal-lm"),
    "mamba-130m": ("text", "mlx-lm", False, "causal-lm"),
    "gemma-3-1b-it": ("text", "mlx-lm", False, "causal-lm"),
    "gemma-3-4b-it": ("vision", "mlx-vlm", False, "vision-language"),
    "qwen2.5-vl-7b": ("vision", "mlx-vlm", False, "vision-language"),
    "mistral-small-3.1": ("vision", "mlx-vlm", False, "vision-language"),
    "gemma-3n-e4b": ("audio", "mlx-vlm", False, "omni-audio"),
    "bge-small-en-v1.5": ("embedding", "mlx-embeddings", False, "encoder-embedding"),
}


def load(name: str) -> dict:
    return json.loads((FIXTURES / "configs" / f"{name}.json").read_text())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_detects(builtin, name):
    found = builtin.detect(load(name))
    assert (found.kind, found.loader, found.moe, found.rule) == EXPECTED[name]


def test_at_least_ten_architectures():
    assert len({load(n)["model_type"] for n in EXPECTED}) >= 10


def test_unknown_architecture_says_what_to_do(builtin):
    with pytest.raises(UndetectableModel) as err:
        builtin.detect(load("t5-small"))
    assert "t5" in str(err.value) and "detection rule" in str(err.value)


def test_generic_keys_catch_unlisted_multimodal_models(builtin):
    config = {"model_type": "brand_new_vlm", "architectures": ["BrandNewForConditionalGeneration"],
              "vision_config": {"hidden_size": 8}}
    assert builtin.detect(config).kind == "vision"
    config = {"model_type": "brand_new_omni_thing", "architectures": ["X"], "audio_config": {}}
    assert builtin.detect(config).kind == "audio"


def test_rule_order_matters(builtin):
    # gemma3n has a vision_config too; the earlier omni rule must win over the generic vision rule.
    assert "vision_config" in load("gemma-3n-e4b")
    names = [r.name for r in builtin.detection.rules]
    assert names.index("omni-audio") < names.index("vision-config")


def test_every_catalog_entry_agrees_with_detection(builtin):
    decoders_for_embeddings = 0
    for family in builtin.families.values():
        for model in family.models:
            found = builtin.detect(model.architecture.config_dict())
            if family.kind == "embedding" and found.kind == "text":  # Qwen3-Embedding: a text model's config
                decoders_for_embeddings += 1
                continue
            assert (found.kind, found.loader) == (family.kind, family.loader), family.name
            assert found.moe == model.architecture.is_moe
    assert decoders_for_embeddings == 3  # its three sizes; the catalog entry is what types them
