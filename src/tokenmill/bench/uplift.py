"""``tokenmill bench --uplift``: what each technique is worth on the live
engine. The same workload and LoadGen settings run on a baseline engine, on
the baseline with one technique switched on, once per technique, and on the
full stack (the engine flags as given); the table reads each run against the
baseline, the way the MLPerf seeds present software uplift.

Baseline: no prefix caching, no chunked prefill (whole prompts, the step
budget raised to the max model length as vLLM does), plain torch attention,
elementwise ops and linears, no CUDA graphs, no speculative decoding, one
in-process engine. Techniques (each only where it applies):
- ``+prefix-caching``: automatic prefix caching;
- ``+chunked-prefill``: prompts split over steps under the flags' budget;
- ``+kernels``: the kernels the flags pick (CPU: the C++ attention, fused ops
  and prepacked/panel linears; CUDA: the compiled fused ops);
- ``+cuda-graphs``: decode steps replayed as CUDA graphs (CUDA only);
- ``+native-step`` (CPU): the kernels plus the decoder layers in one C++ call
  per step (kernels/native_decoder.py), which runs only on those kernels;
- ``+speculative``: the ``--speculative-config`` given (only with one).
A technique the flags switch off is no run of its own (and is off in "full").
"""

from __future__ import annotations

from dataclasses import replace

from tokenmill.config import EngineConfig

BASELINE = {"enable_prefix_caching": False, "enable_chunked_prefill": False, "attention_backend": "torch",
            "fused_ops": "torch", "linear_backend": "torch", "enforce_eager": True, "speculative_config": None}
"""The EngineConfig fields that switch every technique off."""


def uplift_configs(config: EngineConfig, device_type: str) -> list[tuple[str, EngineConfig]]:
    """(label, engine config) of every run, baseline first, full stack last.
    ``config``: the engine as the flags give it (the full stack);
    ``device_type``: "cpu" or "cuda", where it will run."""
    if config.deterministic or config.quantization:
        raise ValueError("uplift: compares techniques of the default engine; drop --deterministic/--quantization")
    base = replace(config, **BASELINE)
    kernels = {"attention_backend": config.attention_backend, "fused_ops": config.fused_ops,
               "linear_backend": config.linear_backend}
    techniques = [("+prefix-caching", {"enable_prefix_caching": config.enable_prefix_caching}),
                  ("+chunked-prefill", {"enable_chunked_prefill": config.enable_chunked_prefill}),
                  ("+kernels", kernels)]
    if device_type == "cuda":
        techniques.append(("+cuda-graphs", {"enforce_eager": config.enforce_eager}))
    elif not config.enforce_eager:
        techniques.append(("+native-step", kernels | {"enforce_eager": False}))
    if config.speculative_config is not None:
        techniques.append(("+speculative", {"speculative_config": config.speculative_config}))
    runs = [("baseline", base)]
    runs += [(label, replace(base, **on)) for label, on in techniques if replace(base, **on) != base]
    return runs + [("full", config)]


def uplift_summary(results) -> dict:
    """{label: {tokens_per_s, vs_baseline, verdict}} in run order, for uplift.json."""
    base = results[0].metrics.tokens_per_s
    return {r.target["label"]: {"tokens_per_s": r.metrics.tokens_per_s,
                                "vs_baseline": r.metrics.tokens_per_s / base if base else None,
                                "verdict": r.verdict.result} for r in results}
