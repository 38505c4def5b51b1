"""Speech-to-text checkpoints: a Whisper (mlx-audio's own class) whose decoder is scripted to say one sentence.

Random Whisper weights make the decoding loop emit timestamp after timestamp for a very long time, so the
decoder is rigged instead (see ../shared/reference/tiny-models.md §2): its blocks add nothing, position p's
embedding points at the p-th token of `SCRIPT`, and those tokens' embedding rows are scaled up. Every window
of audio is then transcribed as the same words, with timestamps or without, which lets tests assert the
transcript exactly and proves the weights were really loaded.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..catalog import Entry, PromptStyle
from .tokenizer import train_bpe

SCRIPT = "hello world"  # no leading space: a lone space token is suppressed at the start of a transcript
SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>", "<|transcribe|>", "<|startoflm|>",
            "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>"]
TIMESTAMPS = [f"<|{i * 0.02:.2f}|>" for i in range(1501)]


def write(dest: Path, entry: Entry, style: PromptStyle | None) -> None:
    from tokenizers import AddedToken

    arch = entry.model.architecture
    seed = entry.quantization.generated.seed
    tokenizer = train_bpe(arch.vocab_size, seed, [])  # text tokens first: every one below <|endoftext|>
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS + TIMESTAMPS])
    tokenizer.save(str(dest / "tokenizer.json"))
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "WhisperTokenizer", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "model_max_length": 448,
        "clean_up_tokenization_spaces": False}, indent=2))
    (dest / "preprocessor_config.json").write_text(json.dumps({
        "feature_extractor_type": "WhisperFeatureExtractor", "processor_class": "WhisperProcessor",
        "feature_size": 80, "sampling_rate": 16000, "hop_length": 160, "chunk_length": 30, "n_fft": 400,
        "padding_side": "right", "padding_value": 0.0, "return_attention_mask": False}, indent=2))
    config = arch.config_dict()
    config["n_vocab"] = tokenizer.get_vocab_size()
    eot, sot = tokenizer.token_to_id("<|endoftext|>"), tokenizer.token_to_id("<|startoftranscript|>")
    config.update(bos_token_id=eot, eos_token_id=eot, pad_token_id=eot, decoder_start_token_id=sot)
    _write_weights(dest, config, seed, tokenizer)
    (dest / "config.json").write_text(json.dumps(config, indent=2))


def _write_weights(dest: Path, config: dict, seed: int, tokenizer) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_audio.stt.models.whisper.whisper import Model, ModelDimensions

    mx.random.seed(seed)
    model = Model(ModelDimensions.from_dict(config), dtype=mx.float32)
    decoder = model.decoder
    for block in decoder.blocks:  # the residual stream is token embedding + position embedding, nothing more
        for layer in (block.attn.out, block.cross_attn.out, block.mlp2):
            layer.weight = mx.zeros_like(layer.weight)
            if "bias" in layer:
                layer.bias = mx.zeros_like(layer.bias)
    target = ([tokenizer.token_to_id(TIMESTAMPS[0])] + tokenizer.encode(SCRIPT).ids
              + [tokenizer.token_to_id(TIMESTAMPS[50]), tokenizer.token_to_id("<|endoftext|>")])
    embedding = decoder.token_embedding.weight
    rows = mx.array(target)
    embedding = embedding.at[rows].multiply(5.0)
    decoder.token_embedding.weight = embedding
    positions = decoder.positional_embedding
    for p, token in enumerate(target):
        positions = positions.at[p].add(10 * embedding[token] - positions[p])
    decoder.positional_embedding = positions
    mx.eval(model.parameters())
    mx.save_safetensors(str(dest / "model.safetensors"), dict(tree_flatten(model.parameters())),
                        metadata={"format": "mlx"})
