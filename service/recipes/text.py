"""Text checkpoints (mlx-lm): the entry's architecture through mlx-lm's own model class, random weights, and a
tokenizer whose special tokens include the prompt style's markup."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..catalog import Entry, PromptStyle
from .tokenizer import train_bpe

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def style_markers(style: PromptStyle | None) -> list[str]:
    """The prompt style's markup (turn tokens, thinking and tool-call tags, stops): each one token, as in the
    real checkpoints, so that markers stream whole and grammars can name them."""
    if style is None:
        return []
    found = re.findall(r"<\|[^|<>\s]+\|>", style.chat_template or "")
    for pair in (style.thinking, style.tool_calls):
        for marker in (getattr(pair, "start", None), getattr(pair, "end", None)):
            found += re.findall(r"<\|[^|<>\s]+\|>", marker) if marker and "<|" in marker else [marker] if marker else []
    found += [s for s in style.stop if len(s) < 32]
    return [m for m in dict.fromkeys(found) if m not in SPECIAL_TOKENS]


def write_tokenizer(dest: Path, vocab_size: int, seed: int, style: PromptStyle | None, max_length: int) -> int:
    """Train and save a byte-level BPE tokenizer; returns the EOS token id."""
    tokenizer = train_bpe(vocab_size, seed, SPECIAL_TOKENS + style_markers(style))
    tokenizer.save(str(dest / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "bos_token": None,
        "unk_token": None,
        "model_max_length": max_length,
        "clean_up_tokenization_spaces": False,
    }
    if style is not None and style.chat_template:
        config["chat_template"] = style.chat_template
    (dest / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return tokenizer.token_to_id("<|im_end|>")


def write_weights(dest: Path, entry: Entry, config: dict) -> dict:
    """Instantiate mlx-lm's model class with random weights, cast/quantize, save; returns the final config."""
    import mlx.core as mx
    from mlx.utils import tree_map
    from mlx_lm.utils import _get_classes, quantize_model, save_config, save_model

    quant = entry.quantization
    mx.random.seed(quant.generated.seed)
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    dtype = getattr(mx, _DTYPES.get(quant.mode) or entry.model.architecture.torch_dtype or "float32")
    model.update(tree_map(lambda p: p.astype(dtype) if mx.issubdtype(p.dtype, mx.floating) else p,
                          model.parameters()))
    if quant.mode not in _DTYPES:
        model, config = quantize_model(model, config, quant.group_size, quant.bits, mode=quant.mode)
    mx.eval(model.parameters())
    save_model(dest, model)
    save_config(dict(config), dest / "config.json")
    return config


def write(dest: Path, entry: Entry, style: PromptStyle | None) -> None:
    arch = entry.model.architecture
    eos = write_tokenizer(dest, arch.vocab_size, entry.quantization.generated.seed, style, entry.context_length)
    config = arch.config_dict()
    config.setdefault("eos_token_id", eos)
    config.setdefault("torch_dtype", arch.torch_dtype or "float32")
    write_weights(dest, entry, config)
