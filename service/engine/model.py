"""Load and free MLX models (runs on the MLX thread)."""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ModelHandle:
    """What the decode loop needs: the model, its tokenizer, stop strings and its prompt (KV prefix) cache."""

    key: str
    model: Any
    tokenizer: Any
    stops: list[str] = field(default_factory=list)
    prompt_cache: Any = None  # mlx_lm LRUPromptCache, or None when prefix reuse is off
    active_bytes: int = 0  # MLX memory this model took when it was loaded


def load(key: str, path: Path, *, chat_template: str | None, override_template: bool, stops: list[str],
         trust_remote_code: bool, cache_entries: int, cache_bytes: int) -> ModelHandle:
    import mlx.core as mx
    import mlx_lm
    from mlx_lm.models.cache import LRUPromptCache

    before = mx.get_active_memory()
    try:
        model, tokenizer = mlx_lm.load(str(path), tokenizer_config={"trust_remote_code": trust_remote_code})
        mx.eval(model.parameters())
    except BaseException:
        free()
        raise
    if chat_template and (override_template or not getattr(tokenizer, "chat_template", None)):
        tokenizer.chat_template = chat_template
    cache = LRUPromptCache(max_size=cache_entries, max_bytes=cache_bytes) if cache_entries > 0 else None
    return ModelHandle(key, model, tokenizer, list(stops), cache, mx.get_active_memory() - before)


def free() -> None:
    """Return memory to the system once the last reference to a model is gone."""
    import mlx.core as mx

    gc.collect()
    mx.clear_cache()
