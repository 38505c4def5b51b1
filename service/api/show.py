"""Ollama's /api/show rendered from the catalog (works before a model is downloaded)."""

from __future__ import annotations

import json
from pathlib import Path

from ..catalog import Catalog, Entry
from ..catalog.memory import estimate
from ..catalog.scaffold import read_json_object
from .listing import mtime_iso

CAPABILITIES = {"chat": "completion", "generate": "completion", "tools": "tools", "vision": "vision",
                "thinking": "thinking", "embedding": "embedding", "audio": "audio",
                "transcription": "audio"}


def capabilities(entry: Entry | None) -> list[str]:
    """Ollama's capability names for what the catalog says a model can do (what requests are checked against);
    a model outside the catalog is assumed to chat and complete only."""
    abilities = entry.family.abilities if entry else ("chat", "generate")
    return sorted({CAPABILITIES[a] for a in abilities}, key=list(CAPABILITIES.values()).index)


def _human(n: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(int(n))


def quantization_level(entry: Entry) -> str:
    q = entry.quantization
    return {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}.get(q.mode) or (
        f"Q{q.bits}" if q.mode == "affine" else q.mode.upper())


def summary_details(entry: Entry | None) -> dict:
    if entry is None:
        return {"parent_model": "", "format": "safetensors", "family": "", "families": [], "parameter_size": "",
                "quantization_level": ""}
    arch = entry.model.architecture
    return {"parent_model": "", "format": "safetensors", "family": arch.model_type, "families": [arch.model_type],
            "parameter_size": _human(entry.model.parameters), "quantization_level": quantization_level(entry),
            "context_length": entry.context_length, "embedding_length": arch.hidden_size}


def _model_info(entry: Entry | None, config: dict) -> dict:
    if entry is not None:
        config = {**entry.model.architecture.config_dict(), **config}
    text = {**config, **(config.get("text_config") or {})}
    arch = str(config.get("model_type") or "unknown")
    info = {"general.architecture": arch, "general.basename": entry.family.name if entry else arch}
    if entry is not None:
        info["general.parameter_count"] = int(entry.model.parameters)
        info["general.license"] = entry.license
    keys = {"context_length": "max_position_embeddings", "embedding_length": "hidden_size",
            "block_count": "num_hidden_layers", "attention.head_count": "num_attention_heads",
            "attention.head_count_kv": "num_key_value_heads", "attention.key_length": "head_dim",
            "attention.sliding_window": "sliding_window", "feed_forward_length": "intermediate_size",
            "vocab_size": "vocab_size", "expert_count": "num_experts", "expert_used_count": "num_experts_per_tok"}
    for key, source in keys.items():
        if isinstance(text.get(source), int):
            info[f"{arch}.{key}"] = text[source]
    if entry is not None:
        info[f"{arch}.context_length"] = entry.context_length
        scaling = entry.context.rope_scaling
        if entry.context.extended:  # what RoPE scaling reaches, as the model card gives it
            info[f"{arch}.context_length_extended"] = entry.context.extended
        if scaling is not None:
            info[f"{arch}.rope.scaling.type"] = scaling.type
            info[f"{arch}.rope.scaling.factor"] = scaling.factor
            if scaling.original_context:
                info[f"{arch}.rope.scaling.original_context_length"] = scaling.original_context
    return info


def _parameters(entry: Entry | None, stops: list[str]) -> str:
    lines = []
    if entry is not None:
        s = entry.family.sampling
        for key, value in (("temperature", s.temperature), ("top_p", s.top_p), ("top_k", s.top_k),
                           ("min_p", s.min_p), ("repeat_penalty", s.repetition_penalty)):
            if value is not None:
                lines.append(f"{key:<30} {value}")
        lines.append(f"{'num_ctx':<30} {entry.context_length}")
    lines += [f"{'stop':<30} {json.dumps(stop)}" for stop in stops]
    return "\n".join(lines)


def render_show(catalog: Catalog, entry: Entry | None, name: str, path: Path | None) -> dict:
    config = read_json_object(path / "config.json") if path else {}
    style = catalog.prompt_style(entry) if entry else None
    template = (read_json_object(path / "tokenizer_config.json").get("chat_template") if path else None) or (
        style.chat_template if style else None) or ""
    if path and (path / "chat_template.jinja").is_file():
        template = (path / "chat_template.jinja").read_text(encoding="utf-8")
    stops = list(style.stop) if style else []
    modified = max((p.stat().st_mtime for p in path.glob("*")), default=0) if path else 0
    out = {
        "license": entry.license if entry else "",
        "modelfile": f"# Modelfile generated by \"mlx-service show\"\nFROM {name}\n",
        "parameters": _parameters(entry, stops),
        "template": template,
        "details": summary_details(entry),
        "model_info": _model_info(entry, config),
        "capabilities": capabilities(entry),
        "modified_at": mtime_iso(int(modified)),
        "mlx_service": {
            "name": name,
            "downloaded": path is not None,
            "path": str(path) if path else None,
            "repo": entry.quantization.repo if entry else None,
            "kind": entry.family.kind if entry else None,
            "loader": entry.family.loader if entry else None,
            "memory_estimate": estimate(entry).as_dict() if entry else None,
        },
    }
    return out
