"""A word-level tokenizer for random-weight checkpoints (tests, benchmarks):
token i is the word ``t{i}``, words split on spaces, so an HF directory of a
made-up model can be served and its ids read back. Not for real text."""

from __future__ import annotations

import json
from pathlib import Path


def save_word_tokenizer(root: Path, vocab_size: int) -> None:
    """Write tokenizer.json and tokenizer_config.json (BOS 't0', EOS 't1') into ``root``."""
    import tokenizers
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    tok = tokenizers.Tokenizer(WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t2"))
    tok.pre_tokenizer = WhitespaceSplit()
    tok.save(str(Path(root) / "tokenizer.json"))
    (Path(root) / "tokenizer_config.json").write_text(json.dumps({"eos_token": "t1", "bos_token": "t0"}))
