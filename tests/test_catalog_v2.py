"""Catalog format 2: the migration from format 1, the new fields and their broken inputs (located), license
overrides in /api/show, the estimator on hybrid and latent-attention layouts, and the built-in catalog's facts
against the loaders' own model classes."""

from __future__ import annotations

import pytest

from service.catalog import load_catalog
from service.catalog.memory import estimate, kv_bytes, state_bytes

from .conftest import FIXTURES, VALID_FAMILY

# VALID_FAMILY is kept in format 1; the same family in format 2, with what format 2 adds.
V2 = (VALID_FAMILY.replace("schema_version: 1", "schema_version: 2")
      .replace("context_length: 4096", "context: {native: 4096}")
      + "      sources:\n        - https://example.com/testfam-1b/config.json\n")


def problems_of(write, text: str):
    result = load_catalog([write(text)])
    return [p for p in result.problems if p.file.endswith("family.yaml")], result


def mutate(old: str, new: str, text: str = V2) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


# ---- migration ----------------------------------------------------------------------------------------------
def test_a_format_1_file_is_migrated_context_and_verification_included(write):
    mine, result = problems_of(write, VALID_FAMILY)
    assert mine == []
    entry = result.catalog.resolve("testfam")
    assert entry.context.native == 4096 and entry.context.extended is None
    assert not entry.verified  # format 1 could not cite sources: verified now means "with sources"
    assert entry.license == "mit"


def test_the_kept_format_1_fixtures_load_and_serve_the_same_facts():
    result = load_catalog([FIXTURES / "catalog-v1"])
    assert [p for p in result.problems if "catalog-v1" in p.file] == []
    assert result.catalog.resolve("oldfam:7b").context_length == 16384  # a size's own context_length
    assert result.catalog.resolve("oldfam:1b").context_length == 32768  # the family's
    assert [e.verified for e in result.catalog.entries() if e.family.name == "oldfam"] == [False, False]
    patched = result.catalog.resolve("qwen3:8b")  # a format-1 `extends` layer over the built-in catalog
    assert patched.context_length == 8192 and patched.verified  # untouched sizes keep their verification


def test_a_problem_in_a_migrated_key_points_at_the_line_the_author_wrote(write):
    mine, _ = problems_of(write, VALID_FAMILY.replace("context_length: 4096", "context_length: 0"))
    assert [(p.code, p.line) for p in mine] == [("schema-minimum", 12)]
    assert mine[0].json_path == "$.family.context.native"


# ---- the new fields, broken ----------------------------------------------------------------------------------
SIZE_LINES = "          quantizations:\n"
CASES = {
    "extended-not-longer": (mutate("context: {native: 4096}", "context: {native: 4096, extended: 2048, "
                                   "rope_scaling: {type: yarn, factor: 2.0}}"), "context", 12),
    "extended-without-scaling": (mutate("context: {native: 4096}", "context: {native: 4096, extended: 8192}"),
                                 "context", 12),
    "rope-type": (mutate("context: {native: 4096}", "context: {native: 4096, extended: 8192, rope_scaling: "
                         "{type: ntk-by-parts, factor: 2.0}}"), "schema-enum", 12),
    "rope-factor": (mutate("context: {native: 4096}", "context: {native: 4096, extended: 8192, rope_scaling: "
                           "{type: yarn, factor: 1}}"), "schema-exclusive-minimum", 12),
    "source-pattern": (mutate("        - https://example.com/testfam-1b/config.json",
                              "        - not a source"), "schema-pattern", 34),
    "license-empty": (mutate("      parameters: 1000000000\n", "      parameters: 1000000000\n      license: ''\n"),
                      "schema-min-length", 17),
    "verified-without-sources": (V2.replace("      sources:\n        - https://example.com/testfam-1b/config.json\n",
                                            ""), "unverified-sources", 15),
    "linear-without-state": (mutate("        vocab_size: 32000\n", "        vocab_size: 32000\n"
                                    "        attention_pattern: [linear_attention, full_attention]\n"),
                             "layer-state", 26),
    "mamba-state-incomplete": (mutate("        vocab_size: 32000\n", "        vocab_size: 32000\n"
                                      "        attention_pattern: [mamba, full_attention]\n"
                                      "        mamba: {heads: 8, head_dim: 64}\n"), "schema-required", 27),
    "state-without-layers": (mutate("        vocab_size: 32000\n", "        vocab_size: 32000\n"
                                    "        mamba: {heads: 8, head_dim: 64, state_size: 64, groups: 1, "
                                    "conv_kernel: 4}\n"), "layer-state", 26),
    "mla-without-rope": (mutate("        vocab_size: 32000\n", "        vocab_size: 32000\n"
                                "        kv_lora_rank: 512\n"), "mla", 26),
    "attention-type": (mutate("        vocab_size: 32000\n", "        vocab_size: 32000\n"
                              "        attention_pattern: [gated_delta]\n"), "schema-enum", 26),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_new_fields_broken_are_located(name, write):
    text, code, line = CASES[name]
    mine, _ = problems_of(write, text)
    assert any(p.code == code for p in mine), [str(p) for p in mine]
    problem = next(p for p in mine if p.code == code)
    assert problem.line == line, str(problem)
    assert "\n" not in str(problem)


def test_the_v2_fixture_itself_is_clean_and_verified(write):
    mine, result = problems_of(write, V2)
    assert mine == []
    assert result.catalog.resolve("testfam").verified


# ---- license overrides, context, in /api/show ---------------------------------------------------------------
def test_license_overrides_and_extended_context_reach_api_show(builtin):
    from service.api.show import render_show

    three = builtin.resolve("qwen2.5:3b")
    seven = builtin.resolve("qwen2.5:7b")
    assert (three.license, seven.license) == ("qwen-research", "apache-2.0")
    shown = render_show(builtin, three, three.tag, None)
    assert shown["license"] == "qwen-research" and shown["model_info"]["general.license"] == "qwen-research"
    info = render_show(builtin, seven, seven.tag, None)["model_info"]
    assert info["qwen2.context_length"] == 32768 and info["qwen2.context_length_extended"] == 131072
    assert info["qwen2.rope.scaling.type"] == "yarn" and info["qwen2.rope.scaling.factor"] == 4.0


def test_the_four_reported_facts_are_fixed(builtin):
    coder = builtin.resolve("qwen3-coder:30b-a3b")
    assert coder.model.architecture.intermediate_size == 5472
    assert builtin.prompt_style(coder).tool_calls.format == "xml_function"
    assert builtin.resolve("qwen2.5-vl:3b").license == "qwen-research"
    qwq = builtin.resolve("qwq").context
    assert (qwq.native, qwq.extended, qwq.rope_scaling.type) == (40960, 131072, "yarn")


# ---- the estimator on the newer layouts ----------------------------------------------------------------------
def test_linear_attention_and_mamba_layers_hold_a_fixed_state(builtin):
    nxt = builtin.resolve("qwen3-next").model
    arch = nxt.architecture
    per_layer = state_bytes(nxt, "linear_attention", 2)
    conv = (4 - 1) * (2 * 16 * 128 + 32 * 128) * 2  # (kernel - 1) x channels x bf16
    assert per_layer == conv + 32 * 128 * 128 * 4  # plus the float32 recurrent state
    short, per_token = kv_bytes(nxt, 1000, 2)
    long, _ = kv_bytes(nxt, 100_000, 2)
    full_layers = arch.layer_types.count("full_attention")
    assert full_layers == 12 and per_token == full_layers * 2 * 2 * 256 * 2
    assert long - short == per_token * (100_096 - 1024)  # only the 12 full layers grow (steps of 256)
    assert short == per_token * 1024 + 36 * per_layer


def test_latent_attention_caches_the_latent_and_the_rotary_key(builtin):
    v3 = builtin.resolve("deepseek-v3").model
    _, per_token = kv_bytes(v3, 4096, 2)
    assert per_token == 61 * (512 + 64) * 2  # vs 61 x 2 x 128 x 192 x 2 for plain attention


def test_mla_prefill_holds_the_rotary_scores_too(builtin):
    mla = load_catalog([FIXTURES.parent.parent / "bench" / "catalog"]).catalog.resolve("bench-mla:small-f32")
    plain = estimate(mla, context=4096, fused_attention=True)
    assert plain.activations > 8 * 2047 * 2048 * 4  # the rotary scores are a mask even where attention is fused


# ---- the built-in catalog against the loaders' own model classes --------------------------------------------
# Keys config.json files carry that the catalog does not (they do not change a parameter count).
_FILL = {"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "decoder_sparse_step": 1, "mlp_only_layers": [],
         "norm_topk_prob": True, "logits_scaling": 1.0, "attention_multiplier": 1.0, "embedding_multiplier": 1.0,
         "residual_multiplier": 1.0, "attention_bias": False, "mlp_bias": False, "layer_norm_epsilon": 1e-6,
         "partial_rotary_factor": 1.0, "rope_scaling": None, "shared_intermediate_size": 0}


def _text_entries():
    catalog = load_catalog([]).raise_for_problems()
    seen = set()
    for entry in catalog.entries():
        key = (entry.family.name, entry.model.size)
        if entry.family.loader == "mlx-lm" and entry.quantization.repo and key not in seen:
            seen.add(key)
            yield pytest.param(entry, id=f"{key[0]}:{key[1]}")


@pytest.mark.parametrize("entry", list(_text_entries()))
def test_architecture_facts_reproduce_the_cards_parameter_count(entry):
    """mlx-lm builds the model lazily from the catalog's facts (no memory is touched): a wrong layer count, width or
    expert count shows as a parameter count the model card does not publish."""
    from mlx.utils import tree_flatten
    from mlx_lm.utils import _get_classes

    config = {**_FILL, **entry.model.architecture.config_dict()}
    if entry.model.architecture.num_experts:
        config.setdefault("num_local_experts", entry.model.architecture.num_experts)
        config.setdefault("n_routed_experts", entry.model.architecture.num_experts)
    model_class, args_class = _get_classes(config)
    weights = tree_flatten(model_class(args_class.from_dict(config)).parameters())
    tied = entry.model.architecture.tie_word_embeddings  # a tied checkpoint has no lm_head (some classes build one)
    built = sum(v.size for name, v in weights if not (tied and name.startswith("lm_head")))
    assert abs(built / entry.model.parameters - 1) < 0.02, f"built {built:,} vs catalog {entry.model.parameters:,.0f}"
