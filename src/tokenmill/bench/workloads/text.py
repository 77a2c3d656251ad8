"""Random text with an exact token count, for synthetic prompts and replies.

The words are the vocabulary's own whole-word tokens: a word-start marker and
2-12 lowercase letters ('Ġhistory' in byte-level BPE, '▁history' in
SentencePiece). Special and control tokens never match, an OpenAI endpoint
gets readable text, and each word re-encodes to about one token. Drawing
target-count words, then re-encoding and trimming or extending, makes the
count exact in a round or two (the first word, lacking its leading space,
may split into pieces).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenmill.model.tokenizer import Tokenizer

_WORD_TOKEN = re.compile(r"[Ġ▁]([a-z]{2,12})")
# Fewer distinct words than this and random prompts would repeat n-grams often
# enough to give prefix caching accidental hits.
MIN_WORDS = 256
# Word tokens round-trip, so one or two rounds suffice; text that still misses
# after this many is returned as it stands (len(ids) tells the caller).
_MAX_ROUNDS = 8


@dataclass(frozen=True)
class WordSource:
    tokenizer: Tokenizer
    words: tuple[str, ...]
    """Sorted, so that a seed draws the same words in every process."""

    @classmethod
    def from_tokenizer(cls, tokenizer: Tokenizer) -> WordSource:
        tokens = tokenizer.convert_ids_to_tokens(range(tokenizer.vocab_size))
        found = {m.group(1) for i, t in enumerate(tokens)
                 if t and i not in tokenizer.all_special_ids and (m := _WORD_TOKEN.fullmatch(t))}
        if len(found) < MIN_WORDS:
            raise ValueError(f"tokenizer: {tokenizer.name_or_path} has {len(found)} whole-word tokens "
                             f"('Ġword' or '▁word'); synthetic text needs at least {MIN_WORDS}")
        return cls(tokenizer, tuple(sorted(found)))

    def text(self, rng: random.Random, num_tokens: int, add_special_tokens: bool = False) -> tuple[str, list[int]]:
        """(text, tokenizer.encode(text, add_special_tokens)) with len(ids) == num_tokens,
        or one more than the tokens encode adds by itself when num_tokens leaves
        no room for text (a prompt is never empty)."""
        encode = self.tokenizer.encode
        target = max(num_tokens, len(encode("", add_special_tokens=add_special_tokens)) + 1)
        text = " ".join(rng.choices(self.words, k=target))
        ids = encode(text, add_special_tokens=add_special_tokens)
        for _ in range(_MAX_ROUNDS):
            if len(ids) == target:
                break
            if len(ids) > target:
                text = self.tokenizer.decode(ids[:target])  # drops a BOS; encode adds it back
            else:
                text += " " + " ".join(rng.choices(self.words, k=target - len(ids)))
            ids = encode(text, add_special_tokens=add_special_tokens)
        return text, ids
