"""Checks the JSON Schema cannot express: cross-references, uniqueness, quantization sanity, detection."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from .detect import UndetectableModel, detect, is_moe
from .memory import bits_per_weight
from .model import Context, Entry, Family, Model, Quantization
from .problems import Problem
from .resolve import spellings

if TYPE_CHECKING:
    from .catalog import Catalog
    from .loader import Locator

# mode -> (allowed bits, allowed group sizes); None = no grouping
_MODES = {
    "affine": ({2, 3, 4, 5, 6, 8}, {32, 64, 128}),
    "mxfp4": ({4}, {32}),
    "mxfp8": ({8}, {32}),
    "nvfp4": ({4}, {16}),
    "bfloat16": ({16}, None),
    "float16": ({16}, None),
    "float32": ({32}, None),
}
# checkpoint size vs parameters x bits: beyond these ratios the size or the parameter count is a typo
_SIZE_RATIO = (0.6, 1.6)


def check(catalog: Catalog, at: Locator, order: list[str] | None = None) -> list[Problem]:
    """`order`: family names in the order their layers were loaded, so that a name or repo id that two files
    claim is reported in the later one (the file that brought the clash), not in the built-in catalog."""
    problems: list[Problem] = []
    problems += _names(catalog, at, order or list(catalog.families))
    for family in catalog.families.values():
        problems += list(_family(catalog, family, at))
    return problems


def _names(catalog: Catalog, at: Locator, order: list[str]) -> list[Problem]:
    """A primary name (family, alias, tag) must mean one entry; repo ids must be listed once."""
    owners: dict[str, Entry] = {}
    problems = []
    for family in (catalog.families[name] for name in order if name in catalog.families):
        for key, entry, primary in spellings(family):
            if not primary and "/" not in key:
                continue
            other = owners.setdefault(key.lower(), entry)
            if other.tag != entry.tag:
                code = "duplicate-repo" if "/" in key else "duplicate-name"
                loc = entry.quantization.location if "/" in key else entry.family.location
                problems.append(at.problem(loc, ["repo"] if "/" in key else ["name"], code,
                                           f"`{key}` already names {other.tag}: names and repo ids must be unique"))
    return problems


def _family(catalog: Catalog, fam: Family, at: Locator) -> Iterator[Problem]:
    loc = fam.location
    if fam.prompt_style not in catalog.prompt_styles:
        yield at.problem(loc, ["prompt_style"], "unknown-prompt-style",
                         f"prompt style `{fam.prompt_style}` is not defined; known: "
                         f"{', '.join(sorted(catalog.prompt_styles)) or 'none'}")
    else:
        style = catalog.prompt_styles[fam.prompt_style]
        if "thinking" in fam.abilities and style.thinking is None:
            yield at.problem(loc, ["abilities"], "ability-style",
                             f"`thinking` needs thinking tags in prompt style `{style.name}`")
        if "tools" in fam.abilities and style.tool_calls is None:
            yield at.problem(loc, ["abilities"], "ability-style",
                             f"`tools` needs a tool-call format in prompt style `{style.name}`")
    needs = {"vision": "vision", "embedding": "embedding", "audio": "audio", "speech": "transcription"}.get(fam.kind)
    if needs and needs not in fam.abilities:
        yield at.problem(loc, ["abilities"], "ability-kind", f"a {fam.kind} family must list the `{needs}` ability")
    if (fam.embedding is not None) != (fam.kind == "embedding"):
        yield at.problem(loc, ["embedding"] if fam.embedding else ["kind"], "embedding-pooling",
                         "an embedding family says how it pools (`embedding: {pooling: mean|cls|last}`, from its "
                         "model card), and only an embedding family does")
    if fam.kind == "text" and {"vision", "audio"} & set(fam.abilities):
        yield at.problem(loc, ["kind"], "ability-kind",
                         "a family with vision or audio abilities must have kind `vision` or `audio`")
    yield from _context(fam.context, loc, [], at)
    sizes = [m.size for m in fam.models]
    if fam.default_size not in sizes:
        yield at.problem(loc, ["default_size"], "unknown-default-size",
                         f"default size `{fam.default_size}` is not one of the family's sizes: {', '.join(sizes)}")
    seen: set[str] = set()
    for model in fam.models:
        if model.size in seen:
            yield at.problem(model.location, ["size"], "duplicate-size", f"size `{model.size}` is listed twice")
        seen.add(model.size)
        yield from _model(catalog, fam, model, at)


def _model(catalog: Catalog, fam: Family, model: Model, at: Locator) -> Iterator[Problem]:
    loc, arch = model.location, model.architecture
    names = [q.name for q in model.quantizations]
    if model.default_quantization not in names:
        yield at.problem(loc, ["default_quantization"], "unknown-default-quantization",
                         f"default quantization `{model.default_quantization}` is not one of: {', '.join(names)}")
    for name in {n for n in names if names.count(n) > 1}:
        yield at.problem(loc, ["quantizations"], "duplicate-quantization", f"quantization `{name}` is listed twice")
    if arch.num_attention_heads % arch.num_key_value_heads:
        yield at.problem(loc, ["architecture", "num_key_value_heads"], "kv-heads",
                         f"num_attention_heads ({arch.num_attention_heads}) must be a multiple of "
                         f"num_key_value_heads ({arch.num_key_value_heads})")
    if arch.head_dim is None and arch.hidden_size % arch.num_attention_heads:
        yield at.problem(loc, ["architecture", "hidden_size"], "head-dim",
                         "hidden_size is not a multiple of num_attention_heads: give `head_dim`")
    if "sliding_attention" in arch.attention_pattern and arch.sliding_window is None:
        yield at.problem(loc, ["architecture", "attention_pattern"], "sliding-window",
                         "sliding-attention layers need `sliding_window`")
    for layer, state in (("linear_attention", arch.linear_attention), ("mamba", arch.mamba)):
        if (layer in arch.attention_pattern) != (state is not None):
            yield at.problem(loc, ["architecture", layer if state else "attention_pattern"], "layer-state",
                             f"`{layer}` layers in `attention_pattern` and the `{layer}:` facts of their state "
                             "(from config.json) go together: give both or neither")
    if arch.kv_lora_rank and not arch.qk_rope_head_dim:
        yield at.problem(loc, ["architecture", "kv_lora_rank"], "mla",
                         "multi-head latent attention caches the latent and the rotary key part: give "
                         "`qk_rope_head_dim` with `kv_lora_rank` (both in config.json)")
    if model.context is not None:
        yield from _context(model.context, loc, [], at)
    if fam.verified and model.verified and not model.sources and any(q.repo for q in model.quantizations):
        yield at.problem(loc, ["size"], "unverified-sources",
                         f"size `{model.size}` is marked verified but cites no `sources`: list the config.json and "
                         "model card its facts were compared with, or set `verified: false`")
    if arch.num_experts_per_tok and arch.num_experts and arch.num_experts_per_tok > arch.num_experts:
        yield at.problem(loc, ["architecture", "num_experts_per_tok"], "experts",
                         "num_experts_per_tok is larger than num_experts")
    if model.active_parameters and model.active_parameters > model.parameters:
        yield at.problem(loc, ["active_parameters"], "active-parameters",
                         "active_parameters is larger than parameters")
    if arch.is_moe and not model.active_parameters:
        yield at.problem(loc, ["parameters"], "active-parameters", "an MoE model needs `active_parameters`")
    if not arch.is_moe and model.active_parameters:
        yield at.problem(loc, ["active_parameters"], "active-parameters",
                         "`active_parameters` is for MoE models: set num_experts or remove it")
    yield from _detection(catalog, fam, model, at)
    for quant in model.quantizations:
        yield from _quantization(fam, model, quant, at)


def _context(context: Context, loc, path: list, at: Locator) -> Iterator[Problem]:
    where = path + ["context"]
    if context.extended is not None and context.extended <= context.native:
        yield at.problem(loc, where + ["extended"], "context",
                         f"the extended context ({context.extended}) must be longer than the native one "
                         f"({context.native})")
    if context.extended is not None and context.rope_scaling is None:
        yield at.problem(loc, where + ["extended"], "context",
                         "an extended context needs the `rope_scaling` that reaches it (from the model card)")


def _detection(catalog: Catalog, fam: Family, model: Model, at: Locator) -> Iterator[Problem]:
    if not catalog.detection.rules:
        return
    loc, config = model.location, model.architecture.config_dict()
    try:
        found = detect(config, catalog.detection)
    except UndetectableModel as exc:
        yield at.problem(loc, ["architecture", "model_type"], "detection", str(exc))
        return
    if fam.kind == "embedding" and found.kind == "text":
        return  # a decoder used for embeddings (Qwen3-Embedding) has a text model's config: its catalog entry decides
    if (found.kind, found.loader) != (fam.kind, fam.loader):
        yield at.problem(loc, ["architecture", "model_type"], "detection",
                         f"detection rule `{found.rule}` types this checkpoint as {found.kind}/{found.loader}, but "
                         f"family `{fam.name}` declares {fam.kind}/{fam.loader}: fix the family or the rules")
    if is_moe(config, catalog.detection.moe_keys) != model.architecture.is_moe:
        yield at.problem(loc, ["architecture"], "detection", "the detection rules' MoE keys disagree with "
                                                            "num_experts: add the expert-count key to `moe_keys`")


def _quantization(fam: Family, model: Model, quant: Quantization, at: Locator) -> Iterator[Problem]:
    loc = quant.location
    bits, groups = _MODES[quant.mode]
    if quant.bits not in bits:
        yield at.problem(loc, ["bits"], "bits-mode",
                         f"mode `{quant.mode}` takes bits {', '.join(map(str, sorted(bits)))}, not {quant.bits}")
    if groups is None and quant.group_size is not None:
        yield at.problem(loc, ["group_size"], "bits-mode", f"mode `{quant.mode}` is not grouped: remove group_size")
    if groups is not None and quant.group_size not in groups:
        yield at.problem(loc, ["group_size"] if quant.group_size else [], "bits-mode",
                         f"mode `{quant.mode}` needs group_size {' or '.join(map(str, sorted(groups)))}")
    if quant.generated and quant.size_bytes:
        yield at.problem(loc, ["size_bytes"], "generated-size", "a generated checkpoint has no download size")
    if quant.size_bytes and quant.bits in bits and (groups is None or quant.group_size in groups):
        expected = model.parameters * bits_per_weight(quant) / 8
        ratio = quant.size_bytes / expected
        if not _SIZE_RATIO[0] <= ratio <= _SIZE_RATIO[1]:
            yield at.problem(loc, ["size_bytes"], "size-mismatch",
                             f"size_bytes {quant.size_bytes:,} is {ratio:.2f}x what {model.parameters:,.0f} "
                             f"parameters at {bits_per_weight(quant):g} bits take ({expected:,.0f}): "
                             "check both numbers")
