"""Vision-language checkpoints: a Qwen2-VL (mlx-vlm's own class and its numpy-only processor), tiny images
(4 to 16 image tokens), and the prompt style's template for text and image parts. See
../shared/reference/tiny-models.md §1 for the constraints a working config must meet."""

from __future__ import annotations

import json
from pathlib import Path

from ..catalog import Entry, PromptStyle
from .tokenizer import train_bpe
from .vlm import write_model

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
            "<|video_pad|>"]


def write(dest: Path, entry: Entry, style: PromptStyle | None) -> None:
    arch = entry.model.architecture
    seed = entry.quantization.generated.seed
    tokenizer = train_bpe(arch.vocab_size, seed, SPECIALS)
    tokenizer.save(str(dest / "tokenizer.json"))
    ids = {t: tokenizer.token_to_id(t) for t in SPECIALS}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "bos_token": None, "unk_token": None, "model_max_length": entry.context_length,
              "clean_up_tokenization_spaces": False}
    if style is not None and style.chat_template:
        config["chat_template"] = style.chat_template
    (dest / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    vision = dict(arch.config_dict().get("vision_config") or {})
    (dest / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor",
        "patch_size": vision.get("patch_size", 14), "temporal_patch_size": vision.get("temporal_patch_size", 2),
        "merge_size": vision.get("spatial_merge_size", 2), "min_pixels": 3136,
        "max_pixels": arch.config_dict().get("max_pixels", 12544),  # tiny by default: 4 to 16 image tokens
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}, indent=2))
    model_config = {**arch.config_dict(), "image_token_id": ids["<|image_pad|>"],
                    "video_token_id": ids["<|video_pad|>"], "vision_start_token_id": ids["<|vision_start|>"],
                    "eos_token_id": [ids["<|im_end|>"]]}
    write_model(dest, model_config, seed)
