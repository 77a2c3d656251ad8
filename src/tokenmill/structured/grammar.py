"""The grammar engine behind structured outputs: llguidance over our vocabulary.

Chosen by measurement (benchmarks/grammar_engines.py, docs/PERFORMANCE.md):
llguidance and xgrammar both keep the per-token mask well under a decode
step; llguidance builds a matcher in about a millisecond with no per-schema
compile step, releases the GIL while it computes masks, handles draft tokens
and rollback (speculative decoding), and is one 3 MB wheel with no
dependencies, where xgrammar pulls triton and transformers.

One GrammarEngine per process and vocabulary: building the token trie takes
about half a second, so it is made once, on first use.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict

import llguidance

from tokenmill.errors import RequestError
from tokenmill.model.tokenizer import Tokenizer
from tokenmill.structured.params import StructuredOutputsParams

log = logging.getLogger(__name__)

GRAMMAR_CACHE_SIZE = 256
"""Grammar texts kept per engine (keyed by the request's constraint)."""


class GrammarEngine:
    def __init__(self, tokenizer: Tokenizer, vocab_size: int | None = None):
        """vocab_size: the model's logit width when it differs from the tokenizer's
        (padded embeddings); ids past the tokenizer are never allowed. A finished
        grammar allows only the end-of-generation ids (``eos_token_ids``)."""
        start = time.perf_counter()
        self.vocab_size = vocab_size or tokenizer.vocab_size
        self.end_ids = frozenset(tokenizer.eos_token_ids or {tokenizer.eos_token_id})
        """What a finished grammar allows: the end-of-generation ids."""
        self.tokenizer = llguidance.LLTokenizer(tokenizer.backend_json(), n_vocab=self.vocab_size,
                                                eos_token=sorted(self.end_ids))
        self._grammars: OrderedDict[StructuredOutputsParams, str] = OrderedDict()
        self._lock = threading.Lock()  # the server validates on several threads
        log.info("grammar engine (llguidance %s) ready for %d tokens in %.2f s", llguidance.__version__,
                 self.vocab_size, time.perf_counter() - start)

    @property
    def mask_words(self) -> int:
        """int32 words per token bitmask row (bit i of word w: token 32 * w + i)."""
        return (self.vocab_size + 31) // 32

    def grammar(self, params: StructuredOutputsParams) -> str:
        """The checked grammar text for ``params``; RequestError naming the field
        when the constraint is invalid (a bad schema, regex or grammar)."""
        with self._lock:
            text = self._grammars.get(params)
            if text is not None:
                self._grammars.move_to_end(params)
                return text
        text = params.grammar_text()
        error = llguidance.LLMatcher.validate_grammar(text, self.tokenizer)
        if error:
            raise RequestError(f"structured_outputs.{params.kind}", f"invalid {params.kind}: {error.strip()}")
        with self._lock:
            self._grammars[params] = text
            while len(self._grammars) > GRAMMAR_CACHE_SIZE:
                self._grammars.popitem(last=False)
        return text

    def matcher(self, params: StructuredOutputsParams) -> llguidance.LLMatcher:
        """A fresh matcher at the start of the output (RequestError as ``grammar``)."""
        matcher = llguidance.LLMatcher(self.tokenizer, self.grammar(params), log_level=0)
        if matcher.is_error():
            raise RequestError(f"structured_outputs.{params.kind}", f"invalid {params.kind}: {matcher.get_error()}")
        return matcher
