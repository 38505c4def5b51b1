"""Immutable typed view of a validated catalog: families, models (sizes), quantizations, prompt styles, rules."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Location:
    """Where an entity was declared: its file and key path. Line and column are looked up only when a
    problem needs them (see loader.Locator), because computing them for every entity costs more than parsing."""

    file: str
    path: tuple = ()


@dataclass(frozen=True)
class LinearAttention:
    """Gated DeltaNet layers (Qwen3-Next): a convolution window and one recurrent state per sequence."""

    key_heads: int
    value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int

    def config(self) -> dict:
        return {"linear_num_key_heads": self.key_heads, "linear_num_value_heads": self.value_heads,
                "linear_key_head_dim": self.key_head_dim, "linear_value_head_dim": self.value_head_dim,
                "linear_conv_kernel_dim": self.conv_kernel}


@dataclass(frozen=True)
class Mamba:
    """Mamba-2 layers (Granite 4.0-H): a convolution window and one SSM state per sequence."""

    heads: int
    head_dim: int
    state_size: int
    groups: int
    conv_kernel: int

    def config(self) -> dict:
        return {"mamba_n_heads": self.heads, "mamba_d_head": self.head_dim, "mamba_d_state": self.state_size,
                "mamba_n_groups": self.groups, "mamba_d_conv": self.conv_kernel}


@dataclass(frozen=True)
class Architecture:
    """Facts from config.json that drive memory estimates, detection checks and `/api/show`."""

    model_type: str
    architectures: tuple[str, ...]
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    head_dim: int | None = None
    intermediate_size: int | None = None
    hidden_act: str | None = None
    max_position_embeddings: int | None = None
    sliding_window: int | None = None
    attention_pattern: tuple[str, ...] = ()
    num_experts: int | None = None
    num_experts_per_tok: int | None = None
    moe_intermediate_size: int | None = None
    tie_word_embeddings: bool | None = None
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    linear_attention: LinearAttention | None = None
    mamba: Mamba | None = None
    torch_dtype: str | None = None
    extra_config: tuple = field(default=(), compare=False)  # (key, value) pairs, written into config.json

    @property
    def effective_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def layer_types(self) -> tuple[str, ...]:
        """Attention type of every layer: the pattern repeated over the layers (all full when absent)."""
        pattern = self.attention_pattern or ("full_attention",)
        return tuple(pattern[i % len(pattern)] for i in range(self.num_hidden_layers))

    @property
    def is_moe(self) -> bool:
        return (self.num_experts or 0) > 1

    def config_dict(self) -> dict:
        """A config.json-shaped dict of these facts (used by detection checks and generated checkpoints)."""
        config = {
            "model_type": self.model_type,
            "architectures": list(self.architectures),
            "num_hidden_layers": self.num_hidden_layers,
            "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "vocab_size": self.vocab_size,
        }
        optional = {
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "hidden_act": self.hidden_act,
            "max_position_embeddings": self.max_position_embeddings,
            "sliding_window": self.sliding_window,
            "num_experts": self.num_experts,
            "num_experts_per_tok": self.num_experts_per_tok,
            "moe_intermediate_size": self.moe_intermediate_size,
            "tie_word_embeddings": self.tie_word_embeddings,
            "kv_lora_rank": self.kv_lora_rank,
            "q_lora_rank": self.q_lora_rank,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "qk_nope_head_dim": self.qk_nope_head_dim,
            "v_head_dim": self.v_head_dim,
            "torch_dtype": self.torch_dtype,
        }
        config.update({k: v for k, v in optional.items() if v is not None})
        for state in (self.linear_attention, self.mamba):
            if state is not None:
                config.update(state.config())
        if self.attention_pattern:
            config["layer_types"] = list(self.layer_types)
        config.update(dict(self.extra_config))
        return config


@dataclass(frozen=True)
class RopeScaling:
    type: str
    factor: float
    original_context: int | None = None


@dataclass(frozen=True)
class Context:
    """Tokens the model handles natively, and with RoPE scaling where its card says so."""

    native: int
    extended: int | None = None
    rope_scaling: RopeScaling | None = None


@dataclass(frozen=True)
class Recipe:
    """How to build a random-weight checkpoint locally instead of downloading one."""

    seed: int
    tokenizer: str = "bpe"


@dataclass(frozen=True)
class Quantization:
    name: str
    bits: int
    mode: str
    group_size: int | None = None
    repo: str | None = None
    revision: str | None = None
    size_bytes: int | None = None
    license: str | None = None
    verified: bool = True
    generated: Recipe | None = None
    location: Location | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Model:
    """One size of a family."""

    size: str
    parameters: float
    architecture: Architecture
    default_quantization: str
    quantizations: tuple[Quantization, ...]
    active_parameters: float | None = None
    context: Context | None = None
    aliases: tuple[str, ...] = ()
    license: str | None = None
    sources: tuple[str, ...] = ()
    verified: bool = True
    location: Location | None = field(default=None, compare=False)

    def quantization(self, name: str) -> Quantization | None:
        return next((q for q in self.quantizations if q.name == name), None)


@dataclass(frozen=True)
class Sampling:
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None


@dataclass(frozen=True)
class Embedding:
    """How an embedding model pools token states into one vector."""

    pooling: str  # mean | cls | last | checkpoint
    normalize: bool = True
    matryoshka: bool = False


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    license: str
    model_card: str
    kind: str
    loader: str
    abilities: tuple[str, ...]
    prompt_style: str
    context: Context
    default_size: str
    models: tuple[Model, ...]
    sampling: Sampling = Sampling()
    aliases: tuple[str, ...] = ()
    trust_remote_code: bool = False
    verified: bool = True
    sources: tuple[str, ...] = ()
    embedding: Embedding | None = None
    location: Location | None = field(default=None, compare=False)

    def model(self, size: str) -> Model | None:
        return next((m for m in self.models if m.size == size), None)


@dataclass(frozen=True)
class ThinkingTags:
    start: str
    end: str


@dataclass(frozen=True)
class ToolCallFormat:
    format: str
    start: str | None = None
    end: str | None = None


@dataclass(frozen=True)
class PromptStyle:
    name: str
    description: str
    chat_template: str | None = None
    override_template: bool = False
    stop: tuple[str, ...] = ()
    thinking: ThinkingTags | None = None
    tool_calls: ToolCallFormat | None = None
    location: Location | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Match:
    model_type: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()
    has_keys: tuple[str, ...] = ()
    has_any_key: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rule:
    name: str
    match: Match
    kind: str
    loader: str
    location: Location | None = field(default=None, compare=False)


@dataclass(frozen=True)
class DetectionRules:
    rules: tuple[Rule, ...]
    moe_keys: tuple[str, ...]


@dataclass(frozen=True)
class Entry:
    """A fully resolved checkpoint: the unit that is pulled, loaded and served."""

    family: Family
    model: Model
    quantization: Quantization

    @property
    def tag(self) -> str:
        return f"{self.family.name}:{self.model.size}-{self.quantization.name}"

    @property
    def context(self) -> Context:
        return self.model.context or self.family.context

    @property
    def context_length(self) -> int:
        """The context served by default: the native one (RoPE scaling is the user's choice, not ours)."""
        return self.context.native

    @property
    def license(self) -> str:
        return self.quantization.license or self.model.license or self.family.license

    @property
    def verified(self) -> bool:
        return self.family.verified and self.model.verified and self.quantization.verified

    @property
    def sources(self) -> tuple[str, ...]:
        return self.model.sources + tuple(s for s in self.family.sources if s not in self.model.sources)
