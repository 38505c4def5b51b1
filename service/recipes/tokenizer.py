"""A byte-level BPE tokenizer trained in milliseconds on a small built-in corpus, for generated checkpoints."""

from __future__ import annotations

import random

_WORDS = (
    "the a model local server token fast small random weight answer question hello world cat dog river stone "
    "light blue green red one two three four five apple orange memory cache layer head value key query time "
    "day night water fire earth air sun moon star tree leaf code test yes no maybe good bad new old long short"
).split()


def corpus(seed: int, lines: int = 2000) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 16))) for _ in range(lines)]


def train_bpe(vocab_size: int, seed: int, specials: list[str]):
    """A trained `tokenizers.Tokenizer` whose first ids are `specials`, in order."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(corpus(seed), trainer=trainer)
    return tokenizer
