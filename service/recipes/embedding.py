"""Embedding checkpoints: a BERT-style encoder (mlx-vlm's own class), a BPE tokenizer that frames each input
as `[CLS] ... [SEP]`, and the sentence-transformers pooling config the catalog entry names."""

from __future__ import annotations

import json
from pathlib import Path

from ..catalog import Entry, PromptStyle
from .tokenizer import train_bpe
from .vlm import write_model

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_POOLING_KEYS = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token", "last": "pooling_mode_lasttoken"}


def write(dest: Path, entry: Entry, style: PromptStyle | None) -> None:
    from tokenizers import processors

    arch = entry.model.architecture
    tokenizer = train_bpe(arch.vocab_size, entry.quantization.generated.seed, SPECIALS)
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
                                                             special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tokenizer.save(str(dest / "tokenizer.json"))
    limit = arch.max_position_embeddings or entry.context_length
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "[PAD]", "unk_token": "[UNK]",
        "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]", "model_max_length": limit,
        "clean_up_tokenization_spaces": False}, indent=2))
    config = {**arch.config_dict(), "pad_token_id": tokenizer.token_to_id("[PAD]")}
    config.setdefault("type_vocab_size", 2)
    config.setdefault("layer_norm_eps", 1e-12)
    write_model(dest, config, entry.quantization.generated.seed)
    pooling = (dest / "1_Pooling")
    pooling.mkdir()
    how = entry.family.embedding.pooling if entry.family.embedding else "mean"
    (pooling / "config.json").write_text(json.dumps({"word_embedding_dimension": arch.hidden_size,
                                                      **{key: key == _POOLING_KEYS[how] for key in
                                                         _POOLING_KEYS.values()}}, indent=2))
