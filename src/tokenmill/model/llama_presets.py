"""Llama-family shapes for random-weight runs (``dummy:<name>``, model/loaders/dummy.py):
measure large models without their checkpoints. Registered with the family's
registry entry (model/llama_weights.py)."""

from __future__ import annotations

from tokenmill.model.arch import ModelArch

_LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
LLAMA_PRESETS = {k: ModelArch(**v) for k, v in {
    "llama3-8b": dict(family="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                      num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128, rms_norm_eps=1e-5,
                      rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=False,
                      rope_scaling=_LLAMA3_SCALING, eos_token_ids=(128009,)),
    "llama3-1b": dict(family="llama", vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                      num_layers=16, num_heads=32, num_kv_heads=8, head_dim=64, rms_norm_eps=1e-5,
                      rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=True,
                      rope_scaling=_LLAMA3_SCALING, eos_token_ids=(128009,)),
    # For tests: a forward pass in well under a millisecond.
    "tiny": dict(family="llama", vocab_size=512, hidden_size=128, intermediate_size=256,
                 num_layers=2, num_heads=4, num_kv_heads=2, head_dim=32, rms_norm_eps=1e-5,
                 rope_theta=10000.0, max_position_embeddings=2048, tie_word_embeddings=True,
                 eos_token_ids=(2,)),
    "smollm2-135m": dict(family="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
                         num_layers=30, num_heads=9, num_kv_heads=3, head_dim=64, rms_norm_eps=1e-5,
                         rope_theta=100000.0, max_position_embeddings=8192, tie_word_embeddings=True,
                         eos_token_ids=(2,)),
}.items()}
"""Dummy-weight shapes of the family (``dummy:<name>``), registered with its entry."""
