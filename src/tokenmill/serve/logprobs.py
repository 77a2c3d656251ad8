"""Engine logprobs (token ids) -> the chat and completions logprob formats."""

from __future__ import annotations

from collections.abc import Sequence

from tokenmill.outputs import TokenLogprob
from tokenmill.serve.responses import ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, TopLogprob


class TokenDecoder:
    """Text of a single token id, cached (the same ids recur across requests)."""

    def __init__(self, tokenizer, max_entries: int = 1 << 16):
        self.tokenizer = tokenizer
        self.max_entries = max_entries
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self._cache.get(token_id)
        if text is None:
            text = self._decode(token_id)
            if len(self._cache) < self.max_entries:
                self._cache[token_id] = text
        return text

    def _decode(self, token_id: int) -> str:
        if self.tokenizer is None:  # dummy weights: no vocabulary to show
            return f"token_id:{token_id}"
        # Special tokens (an end-of-turn token) are shown: the client asked what was sampled.
        return self.tokenizer.decode([token_id], skip_special_tokens=False)


def chat_logprobs(entries: list[TokenLogprob], decode: TokenDecoder) -> ChatLogprobs:
    def top(token_id: int, logprob: float) -> TopLogprob:
        text = decode(token_id)
        return TopLogprob(token=text, logprob=logprob, bytes=list(text.encode("utf-8")))

    content = []
    for entry in entries:
        text = decode(entry.token_id)
        content.append(ChatTokenLogprob(token=text, logprob=entry.logprob, bytes=list(text.encode("utf-8")),
                                        top_logprobs=[top(t, lp) for t, lp in entry.top]))
    return ChatLogprobs(content=content)


def completion_logprobs(entries: Sequence[TokenLogprob | None], decode: TokenDecoder, text_offset: int,
                        token_ids: Sequence[int] = ()) -> tuple[CompletionLogprobs, int]:
    """Returns the logprobs and the text offset after these tokens; offsets
    count characters from the start of the choice's text (the echoed prompt's,
    with echo). An entry may be None (an echoed prompt's first token: nothing
    precedes it): its token is ``token_ids[i]`` and its token_logprobs and
    top_logprobs are null, as OpenAI returns them."""
    tokens, token_logprobs, tops, offsets = [], [], [], []
    for i, entry in enumerate(entries):
        text = decode(entry.token_id if entry is not None else token_ids[i])
        tokens.append(text)
        token_logprobs.append(entry.logprob if entry is not None else None)
        tops.append({decode(t): lp for t, lp in entry.top} if entry is not None else None)
        offsets.append(text_offset)
        text_offset += len(text)
    return CompletionLogprobs(tokens=tokens, token_logprobs=token_logprobs, top_logprobs=tops,
                              text_offset=offsets), text_offset
