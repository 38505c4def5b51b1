"""Enforcing a job's grammar (`engine.grammar.Constraint`) with llguidance, as an MLX logits processor.

Each job gets its own matcher, so constrained and free jobs share a batch. The processor is called once per
step with the tokens so far; the last one is the token just sampled, which the matcher consumes before it
masks the next step's logits. A solo job's step that ran ahead and was thrown away (on its move into the
batch) is taken back with `rewind`, as its sampler's random draw is.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import llguidance
import llguidance.numpy
import mlx.core as mx
import numpy as np
from llguidance import LLMatcher

from ..engine.grammar import Constraint
from ..errors import BadRequest


class Guide:
    """One model's llguidance tokenizer (built on first use: about a second for a 150k vocabulary) and the
    processors made with it."""

    def __init__(self, tokenizer: Any, eos_ids: list[int]):
        # mlx-lm's TokenizerWrapper holds the HF tokenizer (which holds a raw `tokenizers.Tokenizer` in turn)
        self._hf = tokenizer if hasattr(tokenizer, "backend_tokenizer") else tokenizer._tokenizer
        self._eos = eos_ids
        self._ll: Any = None

    @property
    def tokenizer(self):
        """llguidance's view of the vocabulary, from the fast tokenizer's own JSON (as `llguidance.hf` builds it,
        which accepts only transformers' `PreTrainedTokenizerFast` class, not transformers 5's backends)."""
        if self._ll is None:
            backend = copy.copy(self._hf.backend_tokenizer)
            backend.no_padding()
            backend.no_truncation()
            self._ll = llguidance.LLTokenizer(backend.to_str(), eos_token=self._eos or self._hf.eos_token_id)
        return self._ll

    def lit(self, text: str) -> str:
        """A Lark atom for `text`: its special tokens as token references (`<[id]>`), the rest quoted."""
        ll, parts, plain = self.tokenizer, [], []
        for token in self._hf.encode(text, add_special_tokens=False):
            if ll.is_special_token(token):
                if plain:
                    parts.append(json.dumps(self._hf.decode(plain), ensure_ascii=False))
                    plain = []
                parts.append(f"<[{token}]>")
            else:
                plain.append(token)
        if plain:
            parts.append(json.dumps(self._hf.decode(plain), ensure_ascii=False))
        return " ".join(parts) or '""'

    def single_token(self, text: str) -> bool:
        ids = self._hf.encode(text, add_special_tokens=False)
        return len(ids) == 1 and self.tokenizer.is_special_token(ids[0])

    def processor(self, constraint: Constraint, prompt_text: str) -> GrammarProcessor:
        opened = bool(constraint.think_start) and prompt_text.rstrip().endswith(constraint.think_start)
        # Free reasoning before the constrained answer is only well defined when its end is one token.
        think = bool(constraint.think_end) and self.single_token(constraint.think_end)
        grammar = LLMatcher.grammar_from_lark(constraint.lark(self.lit, opened=opened, think=think))
        matcher = LLMatcher(self.tokenizer, grammar)
        if matcher.is_error():
            raise BadRequest(f"the schema cannot be enforced with this model's tokenizer: {matcher.get_error()}")
        return GrammarProcessor(matcher, self.tokenizer.vocab_size)


class GrammarProcessor:
    def __init__(self, matcher: LLMatcher, vocab_size: int):
        self.matcher = matcher
        self.started = False  # the first call comes after the prompt: nothing generated to consume yet
        self.consumed = 0
        self.words = llguidance.numpy.allocate_token_bitmask(1, vocab_size)
        self.vocab_size = vocab_size

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        if self.started:
            self.matcher.consume_token(int(tokens[-1].item()))
            self.consumed += 1
        self.started = True
        if self.matcher.is_error():
            raise RuntimeError(f"structured output failed: {self.matcher.get_error()}")
        llguidance.numpy.fill_next_token_bitmask(self.matcher, self.words, 0)
        allowed = np.unpackbits(self.words.view(np.uint8), bitorder="little")[: self.vocab_size].astype(bool)
        width = logits.shape[-1]
        if width > allowed.size:  # the model's embedding is padded past the tokenizer's vocabulary
            allowed = np.concatenate([allowed, np.zeros(width - allowed.size, dtype=bool)])
        return mx.where(mx.array(allowed[:width]), logits, -mx.inf)

    def rewind(self) -> None:
        """Take back the last step: the token it consumed is consumed again by the next call."""
        if self.consumed:
            self.matcher.rollback(1)
            self.consumed -= 1
        else:
            self.started = False
