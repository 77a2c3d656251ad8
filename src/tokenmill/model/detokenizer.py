"""Incremental detokenization: text deltas for a stream of generated token ids.

Decoding token by token is wrong twice over: a character can span tokens (byte-level
BPE splits emoji and CJK into bytes), and some decoders look at neighbours (the
sentencepiece prefix space). So each step decodes a short window of recent tokens
twice -- the context already emitted, ``[prefix_offset:read_offset)``, and the context
plus the new tokens, ``[prefix_offset:)`` -- and emits the difference, the same
scheme as vLLM's prefix/read offsets. Cost per step is bounded by the window, not
by the output length.
"""

from __future__ import annotations

from tokenmill.model.tokenizer import Tokenizer

_REPLACEMENT = "\ufffd"
# Prompt tokens kept as decoding context, enough to fix how the first output token reads.
_CONTEXT_TOKENS = 5


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Tokenizer, prompt_token_ids: list[int], skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        # _ids holds only the window: [prefix_offset:read_offset) is context whose text is
        # already out (or is prompt), [read_offset:) is output not yet emitted.
        self._ids = list(prompt_token_ids[-_CONTEXT_TOKENS:])
        self.prefix_offset = 0
        self.read_offset = len(self._ids)
        self._pieces: list[str] = []  # emitted deltas, joined on demand (no quadratic +=)

    @property
    def text(self) -> str:
        """All text emitted so far."""
        if len(self._pieces) > 1:
            self._pieces[:] = ["".join(self._pieces)]
        return self._pieces[0] if self._pieces else ""

    def step(self, new_token_ids: list[int]) -> str:
        """Text made final by ``new_token_ids``. A trailing incomplete character (the
        decoded window ends in U+FFFD) is held back until a later token completes it."""
        if not new_token_ids:
            return ""
        self._ids.extend(new_token_ids)
        prefix_text, full_text = self._decode_window()
        if len(full_text) <= len(prefix_text) or full_text.endswith(_REPLACEMENT):
            return ""  # nothing new yet, or a character still missing bytes
        return self._emit(_delta(prefix_text, full_text))

    def flush(self) -> str:
        """Whatever is held back, at the end of the request: an incomplete character
        that never completed comes out as U+FFFD."""
        if self.read_offset == len(self._ids):
            return ""
        prefix_text, full_text = self._decode_window()
        return self._emit(_delta(prefix_text, full_text))

    def _decode_window(self) -> tuple[str, str]:
        decode, skip = self.tokenizer.decode, self.skip_special_tokens
        prefix_text = decode(self._ids[self.prefix_offset:self.read_offset], skip_special_tokens=skip)
        full_text = decode(self._ids[self.prefix_offset:], skip_special_tokens=skip)
        return prefix_text, full_text

    def _emit(self, delta: str) -> str:
        # The emitted text becomes the next window's context; older ids are never read again.
        del self._ids[:self.read_offset]
        self.prefix_offset, self.read_offset = 0, len(self._ids)
        if delta:
            self._pieces.append(delta)
        return delta


def _delta(prefix_text: str, full_text: str) -> str:
    """``full_text`` past ``prefix_text``. They differ inside the prefix only when the
    prefix ended mid-character (a prompt cut inside one); then emit from where they part."""
    if full_text.startswith(prefix_text):
        return full_text[len(prefix_text):]
    common = 0
    for a, b in zip(prefix_text, full_text):
        if a != b:
            break
        common += 1
    return full_text[common:]
