"""Write a catalog entry from a local checkpoint folder, so nobody hand-types architecture facts."""

from __future__ import annotations

import io
import json
import re
import struct
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from .catalog import Catalog
from .detect import UndetectableModel
from .versions import CURRENT_SCHEMA_VERSION

_ARCH_KEYS = [
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "vocab_size", "max_position_embeddings", "sliding_window", "moe_intermediate_size",
    "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
]
# fixed-state layers: the catalog's name -> (its field, config.json's key) pairs
_STATE_KEYS = {
    "linear_attention": [("key_heads", "linear_num_key_heads"), ("value_heads", "linear_num_value_heads"),
                         ("key_head_dim", "linear_key_head_dim"), ("value_head_dim", "linear_value_head_dim"),
                         ("conv_kernel", "linear_conv_kernel_dim")],
    "mamba": [("heads", "mamba_n_heads"), ("head_dim", "mamba_d_head"), ("state_size", "mamba_d_state"),
              ("groups", "mamba_n_groups"), ("conv_kernel", "mamba_d_conv")],
}
_LAYER_TYPES = {"full_attention": "full_attention", "attention": "full_attention",
                "sliding_attention": "sliding_attention", "mamba": "mamba"}
_EXPERT_KEYS = [("num_experts", "num_local_experts", "n_routed_experts"), ("num_experts_per_tok", "experts_per_token")]
_DTYPE_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "U32": 4, "I16": 2, "U16": 2,
                "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


class ScaffoldError(ValueError):
    """The folder is not a checkpoint that can be described (says which file is missing or wrong)."""


def safetensors_headers(folder: Path) -> list[dict]:
    headers = []
    for path in sorted(folder.glob("*.safetensors")):
        with path.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > 100_000_000:
                raise ScaffoldError(f"{path.name}: safetensors header of {length} bytes is not plausible")
            headers.append(json.loads(f.read(length)))
    return headers


def count_parameters(headers: list[dict], bits: int | None) -> tuple[int, int]:
    """(parameters, weight bytes). Packed quantized weights (U32 with `.scales`) count 32/bits values a word."""
    tensors = {k: v for h in headers for k, v in h.items() if k != "__metadata__"}
    params = size = 0
    for name, info in tensors.items():
        numel = 1
        for dim in info["shape"]:
            numel *= dim
        size += numel * _DTYPE_BYTES.get(info["dtype"], 4)
        if name.endswith((".scales", ".biases")) and name.rsplit(".", 1)[0] + ".weight" in tensors:
            continue
        packed = bits and name.endswith(".weight") and name[: -len("weight")] + "scales" in tensors
        params += numel * 32 // bits if packed else numel
    return params, size


def _size_tag(params: int, active: int | None) -> str:
    def short(n: int) -> str:
        value = n / 1e9
        return f"{value:.3g}b" if value >= 1 else f"{n / 1e6:.3g}m"
    return short(params) + (f"-a{short(active)}" if active else "")


def _flow(items) -> CommentedSeq:
    seq = CommentedSeq(items)
    seq.fa.set_flow_style()
    return seq


def scaffold(folder: Path, catalog: Catalog, family: str | None = None, repo: str | None = None) -> str:
    """Return a catalog YAML file (text) describing the checkpoint in `folder`."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ScaffoldError(f"{folder}: no config.json here; point scaffold at a checkpoint folder")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ScaffoldError(f"{config_path}: not valid JSON ({exc})") from exc
    try:
        detected = catalog.detect(config)
    except UndetectableModel as exc:
        raise ScaffoldError(str(exc)) from exc
    text = {**config, **config.get("text_config", {})}
    quant = config.get("quantization") or config.get("quantization_config") or {}
    bits = quant.get("bits")
    params, size_bytes = count_parameters(safetensors_headers(folder), bits)
    if not params:
        raise ScaffoldError(f"{folder}: no *.safetensors weights found")

    arch = CommentedMap(model_type=config["model_type"], architectures=_flow(config.get("architectures", [])))
    for key in _ARCH_KEYS:
        if isinstance(text.get(key), int):
            arch[key] = text[key]
    arch.setdefault("num_key_value_heads", arch.get("num_attention_heads"))
    if isinstance(text.get("layer_types"), list):
        arch["attention_pattern"] = _flow(_cycle(text["layer_types"]))
    elif isinstance(text.get("full_attention_interval"), int) and text["full_attention_interval"] > 1:
        arch["attention_pattern"] = _flow(["linear_attention"] * (text["full_attention_interval"] - 1)
                                          + ["full_attention"])
    for name, keys in _STATE_KEYS.items():
        if all(isinstance(text.get(key), int) for _, key in keys):
            arch[name] = CommentedMap((field, text[key]) for field, key in keys)
    for names in _EXPERT_KEYS:
        value = next((text[n] for n in names if isinstance(text.get(n), int)), None)
        if value is not None:
            arch[names[0]] = value
    act = text.get("hidden_act") or text.get("hidden_activation")
    if isinstance(act, str):
        arch["hidden_act"] = act
    if isinstance(text.get("tie_word_embeddings"), bool):
        arch["tie_word_embeddings"] = text["tie_word_embeddings"]
    dtype = text.get("torch_dtype") or text.get("dtype")
    if dtype in ("float32", "bfloat16", "float16"):
        arch["torch_dtype"] = dtype

    moe = detected.moe
    active = None  # not derivable from files alone; lint asks for it on MoE models
    mode = quant.get("mode", "affine") if bits else (dtype or "bfloat16")
    qname = f"{bits}bit" if bits and mode == "affine" else (mode if bits else {"bfloat16": "bf16", "float16": "f16",
                                                                                 "float32": "f32"}[mode])
    q = CommentedMap(name=qname)
    if repo:
        q["repo"] = repo
    else:
        q["repo"] = "your-org/" + folder.name
    q["bits"] = bits or {"bfloat16": 16, "float16": 16, "float32": 32}[mode]
    if bits:
        q["group_size"] = quant.get("group_size", 64)
    q["mode"] = mode
    q["size_bytes"] = size_bytes
    q["verified"] = False

    size = _size_tag(params, active)
    model = CommentedMap(size=size, parameters=params)
    model["verified"] = False  # until its facts are compared with the upstream config.json and card
    if repo:
        # block style: in a flow list ([...]) a URL's colon needs quotes
        model["sources"] = [f"https://huggingface.co/{repo}/blob/main/config.json"]
    if moe:
        model["active_parameters"] = params  # placeholder: replace with the model card's active count
    model["architecture"] = arch
    model["default_quantization"] = qname
    model["quantizations"] = [q]

    name = family or re.sub(r"[^a-z0-9._-]+", "-", folder.name.lower()).strip("-.") or "my-model"
    has_template = (folder / "chat_template.jinja").is_file() or (
        "chat_template" in read_json_object(folder / "tokenizer_config.json"))
    abilities = {"text": ["chat", "generate"], "vision": ["chat", "vision"], "audio": ["chat", "audio"],
                 "embedding": ["embedding"]}[detected.kind]
    fam = CommentedMap(
        name=name,
        description=f"{folder.name} (scaffolded from a local checkpoint: describe it here).",
        license="unknown",
        model_card=f"https://huggingface.co/{q['repo']}",
        kind=detected.kind,
        loader=detected.loader,
        abilities=_flow(abilities if has_template or detected.kind == "embedding" else ["generate"]),
        prompt_style="embedding" if detected.kind == "embedding" else "chatml",
        context=_context(text, arch.get("max_position_embeddings", 4096)),
        default_size=size,
        verified=False,
        models=[model],
    )
    doc = CommentedMap(schema_version=CURRENT_SCHEMA_VERSION, family=fam)
    yaml = YAML()
    yaml.indent(mapping=2, sequence=4, offset=2)
    out = io.StringIO()
    yaml.dump(doc, out)
    header = "# yaml-language-server: $schema=../../schemas/catalog.schema.json\n"
    header += (f"# Scaffolded from {folder.name} (detection rule `{detected.rule}`): fill in the description, "
               "license and model card.\n")
    if moe:
        header += "# TODO: set active_parameters from the model card (it is a copy of the total here).\n"
    return header + out.getvalue()


def _context(config: dict, native: int) -> CommentedMap:
    """config.json's context, and its RoPE scaling as configured (the model card says what it extends to)."""
    context = CommentedMap(native=native)
    rope = config.get("rope_scaling")
    if not isinstance(rope, dict):
        return context
    kind, factor = rope.get("rope_type") or rope.get("type"), rope.get("factor")
    if kind in ("yarn", "linear", "dynamic", "longrope", "llama3") and isinstance(factor, (int, float)) and factor > 1:
        scaling = CommentedMap(type=kind, factor=factor)
        if isinstance(rope.get("original_max_position_embeddings"), int):
            scaling["original_context"] = rope["original_max_position_embeddings"]
        context["rope_scaling"] = scaling
    return context


def _cycle(layer_types: list) -> list:
    """The shortest repeating pattern of a per-layer list (e.g. 5 sliding + 1 full)."""
    mapped = [_LAYER_TYPES.get(t, "linear_attention") for t in layer_types]
    for n in range(1, len(mapped) + 1):
        if all(mapped[i] == mapped[i % n] for i in range(len(mapped))):
            return mapped[:n]
    return mapped


def read_json_object(path: Path) -> dict:
    """A JSON file's top-level object, or {} when it is missing or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
