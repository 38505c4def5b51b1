"""Build `generated` catalog entries from their recipe: random-weight checkpoints that load through mlx-lm.

They make tests, benchmarks and the offline demo independent of the Hub. The weights come from mlx-lm's own
model classes (so any architecture mlx-lm knows can be generated), the tokenizer is a byte-level BPE trained on a
small built-in corpus, and the chat template comes from the entry's prompt style. Everything is written to a
temporary folder and renamed into place, so a failed build never leaves a folder that looks complete.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import tempfile
from pathlib import Path

from .catalog import Entry, PromptStyle

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_WORDS = (
    "the a model local server token fast small random weight answer question hello world cat dog river stone "
    "light blue green red one two three four five apple orange memory cache layer head value key query time "
    "day night water fire earth air sun moon star tree leaf code test yes no maybe good bad new old long short"
).split()
_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}
COMPLETE_MARKER = "config.json"


def _corpus(seed: int, lines: int = 2000) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 16))) for _ in range(lines)]


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
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS + style_markers(style),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(seed), trainer=trainer)
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


def build_checkpoint(entry: Entry, style: PromptStyle | None, dest: Path) -> Path:
    """Build the checkpoint of a `generated` entry at `dest` (replacing nothing that is already complete)."""
    if entry.quantization.generated is None:
        raise ValueError(f"{entry.tag} is not a generated entry")
    if (dest / COMPLETE_MARKER).is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    arch = entry.model.architecture
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    try:
        eos = write_tokenizer(work, arch.vocab_size, entry.quantization.generated.seed, style, entry.context_length)
        config = arch.config_dict()
        config.setdefault("eos_token_id", eos)
        config.setdefault("torch_dtype", arch.torch_dtype or "float32")
        write_weights(work, entry, config)
        try:
            work.rename(dest)
        except OSError:  # someone else finished first; theirs is complete
            if not (dest / COMPLETE_MARKER).is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest
