"""Turn validated catalog documents into the typed, immutable model (see model.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .model import (
    Architecture,
    Context,
    DetectionRules,
    Embedding,
    Family,
    LinearAttention,
    Location,
    Mamba,
    Match,
    Model,
    PromptStyle,
    Quantization,
    Recipe,
    RopeScaling,
    Rule,
    Sampling,
    ThinkingTags,
    ToolCallFormat,
)

if TYPE_CHECKING:
    from .yamlio import Document


def plain(value):
    """ruamel's commented containers -> plain dicts/lists (frozen models must not alias the YAML tree)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def location(doc: Document, path) -> Location:
    return Location(doc.file, tuple(path))


def architecture(raw: dict) -> Architecture:
    fields = dict(plain(raw))
    fields["architectures"] = tuple(fields["architectures"])
    fields["attention_pattern"] = tuple(fields.get("attention_pattern", ()))
    fields["extra_config"] = tuple(sorted(fields.get("extra_config", {}).items()))
    if "linear_attention" in fields:
        fields["linear_attention"] = LinearAttention(**fields["linear_attention"])
    if "mamba" in fields:
        fields["mamba"] = Mamba(**fields["mamba"])
    return Architecture(**fields)


def context(raw: dict | None) -> Context | None:
    if raw is None:
        return None
    fields = dict(plain(raw))
    if "rope_scaling" in fields:
        fields["rope_scaling"] = RopeScaling(**fields["rope_scaling"])
    return Context(**fields)


def quantization(doc: Document, raw: dict, path) -> Quantization:
    fields = {k: v for k, v in plain(raw).items() if k != "generated"}
    recipe = Recipe(**plain(raw["generated"])) if "generated" in raw else None
    return Quantization(**fields, generated=recipe, location=location(doc, path))


def model(doc: Document, raw: dict, path) -> Model:
    quants = tuple(quantization(doc, q, path + ["quantizations", i]) for i, q in enumerate(raw["quantizations"]))
    return Model(
        size=str(raw["size"]),
        parameters=float(raw["parameters"]),
        active_parameters=float(raw["active_parameters"]) if "active_parameters" in raw else None,
        context=context(raw.get("context")),
        aliases=tuple(raw.get("aliases", ())),
        license=raw.get("license"),
        sources=tuple(raw.get("sources", ())),
        verified=bool(raw.get("verified", True)),
        architecture=architecture(raw["architecture"]),
        default_quantization=str(raw["default_quantization"]),
        quantizations=quants,
        location=location(doc, path),
    )


def family(doc: Document, raw: dict, path) -> Family:
    return Family(
        name=raw["name"],
        description=raw["description"],
        license=raw["license"],
        model_card=raw["model_card"],
        kind=raw["kind"],
        loader=raw["loader"],
        abilities=tuple(raw["abilities"]),
        prompt_style=raw["prompt_style"],
        context=context(raw["context"]),
        default_size=str(raw["default_size"]),
        models=tuple(model(doc, m, path + ["models", i]) for i, m in enumerate(raw["models"])),
        sampling=Sampling(**plain(raw.get("sampling", {}))),
        aliases=tuple(raw.get("aliases", ())),
        trust_remote_code=bool(raw.get("trust_remote_code", False)),
        verified=bool(raw.get("verified", True)),
        sources=tuple(raw.get("sources", ())),
        embedding=Embedding(**plain(raw["embedding"])) if "embedding" in raw else None,
        location=location(doc, path),
    )


def prompt_style(doc: Document, raw: dict, path) -> PromptStyle:
    return PromptStyle(
        name=raw["name"],
        description=raw["description"],
        chat_template=raw.get("chat_template"),
        override_template=bool(raw.get("override_template", False)),
        stop=tuple(raw.get("stop", ())),
        thinking=ThinkingTags(**plain(raw["thinking"])) if "thinking" in raw else None,
        tool_calls=ToolCallFormat(**plain(raw["tool_calls"])) if "tool_calls" in raw else None,
        location=location(doc, path),
    )


def detection(doc: Document, raw: dict, path) -> DetectionRules:
    rules = []
    for i, r in enumerate(raw["rules"]):
        match = {k: tuple(v) for k, v in plain(r["match"]).items()}
        rules.append(Rule(r["name"], Match(**match), r["kind"], r["loader"], location(doc, path + ["rules", i])))
    return DetectionRules(tuple(rules), tuple(raw["moe_keys"]))
