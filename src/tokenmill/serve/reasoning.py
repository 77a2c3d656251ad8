"""Reasoning parsers: split a thinking model's output into reasoning_content and content.

DeepSeek-R1 writes its thinking, then `</think>`, then the answer. Its chat template
already ends the prompt with `<think>\\n`, so the output usually starts inside the
reasoning with no opening tag. The rules (`split` is the definition; the streaming
`feed`/`finish` pair yields exactly the same text for every way of cutting the output
into deltas):

- An opening `<think>` at the very start of the output (after optional whitespace) is
  dropped together with that whitespace. `<think>` anywhere else is plain text.
- Reasoning is everything before the first `</think>`, verbatim. Without a `</think>`
  the whole output is reasoning and there is no content (as vLLM's `deepseek_r1`
  parser does: a generation cut by max_tokens is still thinking).
- Content is everything after the first `</think>` with its leading whitespace removed
  (DeepSeek's API drops the "\\n\\n" the model writes between the tag and the answer).
  Later `</think>` strings are part of the content.
- An empty reasoning or content is None.

The tags must survive detokenization (DeepSeek-R1 marks them as non-special tokens).
"""

from __future__ import annotations

from tokenmill.serve.markers import partial_marker_len

_START, _REASONING, _CONTENT = "start", "reasoning", "content"


class ReasoningTokenCounter:
    """Classifies generated tokens one at a time as reasoning or not.

    Rule: a token is a reasoning token iff the first end tag of the output is not yet
    complete in the text of the tokens before it. So the token that completes the tag
    counts (as does the opening tag, if the model writes it), every later token does
    not, and an output without the end tag is all reasoning tokens, matching `split`.
    Feed each token's own text (the pieces must concatenate to the output text).
    """

    def __init__(self, end_tag: str):
        self._end_tag = end_tag
        self._tail = ""  # last len(end_tag)-1 characters: enough to see a tag cut across tokens
        self.ended = False
        self.count = 0  # reasoning tokens so far: usage.completion_tokens_details.reasoning_tokens

    def add(self, token_text: str) -> bool:
        """Records one generated token; returns whether it is a reasoning token."""
        if self.ended:
            return False
        self.count += 1
        window = self._tail + token_text
        if self._end_tag in window:
            self.ended = True
        else:
            self._tail = window[-(len(self._end_tag) - 1):]
        return True


class DeepSeekR1ReasoningParser:
    """`<think>` ... `</think>` answer. Use a fresh object per request for streaming."""

    start_tag = "<think>"
    end_tag = "</think>"

    def __init__(self) -> None:
        self._state = _START
        # Text received but not yet returned: in _START, the output so far while it may still
        # be (whitespace +) an opening tag; in _REASONING, an end that may be a cut `</think>`.
        self._held = ""
        self._answer_started = False  # a non-whitespace content character has been returned

    def split(self, text: str) -> tuple[str | None, str | None]:
        """Whole output -> (reasoning, content); stateless, any parser object will do."""
        stripped = text.lstrip()
        if stripped.startswith(self.start_tag):
            text = stripped[len(self.start_tag):]
        reasoning, found, content = text.partition(self.end_tag)
        content = content.lstrip() if found else ""
        return reasoning or None, content or None

    def feed(self, delta_text: str) -> tuple[str, str]:
        """Next piece of output -> (reasoning_delta, content_delta); either may be empty."""
        text = self._held + delta_text
        self._held = ""
        if self._state == _START:
            text = self._leave_start(text)
            if self._state == _START:
                return "", ""
        reasoning = ""
        if self._state == _REASONING:
            end = text.find(self.end_tag)
            if end < 0:
                keep = partial_marker_len(text, self.end_tag)
                self._held = text[len(text) - keep:]
                return text[:len(text) - keep], ""
            self._state = _CONTENT
            reasoning, text = text[:end], text[end + len(self.end_tag):]
        return reasoning, self._answer(text)

    def finish(self) -> tuple[str, str]:
        """End of output: what was held back is reasoning (a cut tag never completed)."""
        held, self._held = self._held, ""
        self._state = _CONTENT
        return held, ""

    def token_counter(self) -> ReasoningTokenCounter:
        """A per-request counter for usage.completion_tokens_details.reasoning_tokens."""
        return ReasoningTokenCounter(self.end_tag)

    def count_reasoning_tokens(self, token_texts: list[str]) -> int:
        """Number of reasoning tokens in a whole output given as per-token texts."""
        counter = self.token_counter()
        for piece in token_texts:
            if not counter.add(piece):
                break
        return counter.count

    def _leave_start(self, text: str) -> str:
        """Drops a leading (whitespace +) `<think>`; stays in _START holding `text` while
        it may still become one."""
        stripped = text.lstrip()
        if stripped.startswith(self.start_tag):
            self._state = _REASONING
            return stripped[len(self.start_tag):]
        if self.start_tag.startswith(stripped):  # includes whitespace only
            self._held = text
            return ""
        self._state = _REASONING
        return text

    def _answer(self, text: str) -> str:
        if not self._answer_started:
            text = text.lstrip()
            self._answer_started = bool(text)
        return text


REASONING_PARSERS = {"deepseek_r1": DeepSeekR1ReasoningParser}


def make_reasoning_parser(name: str) -> DeepSeekR1ReasoningParser:
    """A fresh parser for one request, by its `--reasoning-parser` name."""
    cls = REASONING_PARSERS.get(name)
    if cls is None:
        raise ValueError(f"unknown --reasoning-parser {name!r}; choices: {', '.join(sorted(REASONING_PARSERS))}")
    return cls()
