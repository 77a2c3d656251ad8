"""Tiny random-weight HF checkpoints of the MoE families for tests: built with
transformers from a small config, saved with ``save_pretrained`` (safetensors)
next to a word-level tokenizer, so tokenmill's HF-directory loader and the
whole engine can run them and be compared with transformers token for token."""

from __future__ import annotations

from pathlib import Path

import torch

from tokenmill.model.word_tokenizer import save_word_tokenizer


def save_checkpoint(model, root: Path) -> Path:
    """save_pretrained + tokenizer; returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(root, safe_serialization=True)
    save_word_tokenizer(root, model.config.vocab_size)
    return root


def hf_greedy(model, prompt: list[int], max_tokens: int) -> list[int]:
    """transformers' greedy continuation (no EOS stop)."""
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=max_tokens, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()
