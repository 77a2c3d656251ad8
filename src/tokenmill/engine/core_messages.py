"""The typed messages that cross the engine-core boundary.

An ``EngineCore`` (engine/core.py) takes token ids in and gives token ids
out; everything textual (tokenizing, chat templates, detokenizing, stop
strings) stays on the caller's side (input_processor.py, output_processor.py).
The same messages serve an in-process caller (``LLMEngine``, ``AsyncEngine``)
and a remote one (a worker process behind a router): they are msgspec Structs
of plain values — no live ``Request``, no ``torch.Generator``, no callables —
and cross a process boundary as msgpack (``encode`` / ``decode_*``), never
pickle.

Into the core:
- ``EngineCoreRequest``: a request, optionally resumed (``ResumeState``);
- ``EngineCoreFinish``: end requests early (abort, a stop string the caller
  found, a failure on the caller's side).
Out of the core, once per step:
- ``EngineCoreOutputs``: one ``EngineCoreOutput`` per request that advanced or
  ended, the KV events drained this step (when someone subscribed) and the
  load stats a router reads.
"""

from __future__ import annotations

import time

import msgspec

from tokenmill.engine.client import EngineStats
from tokenmill.engine.kv_events import KVEventBatch
from tokenmill.outputs import TokenLogprob
from tokenmill.sampling_params import SamplingParams

FAILURE_STAGES = {"forward": "running the model on", "sampling": "sampling", "output": "detokenizing"}
"""Where a request can fail on its own (EngineStats.request_failures keys) ->
the verb its error message uses."""


class ResumeState(msgspec.Struct, frozen=True):
    """Where a request that already generated tokens elsewhere continues.

    The core recomputes the KV of prompt + ``output_token_ids`` (prefix-cache
    hits skip what it already holds), then samples output position
    ``len(output_token_ids)``. Seeded sampling is counter-based
    (engine/counter_rng.py): that position is the whole sampling state, so a
    resumed request continues token-identically to one that never moved
    (exactly so in deterministic mode; otherwise up to the rounding of a
    prefill vs. a decode step). ``max_tokens`` and the penalties count these
    tokens as generated."""

    output_token_ids: list[int]
    """Tokens generated before the move, in order (already delivered to the client)."""


class EngineCoreRequest(msgspec.Struct, frozen=True):
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    eos_token_ids: tuple[int, ...] | None = None
    """End-of-sequence ids (the tokenizer's, set by the input processor); None:
    the model's own from its config."""
    resume: ResumeState | None = None
    prefill_only: bool = False
    """Disaggregated serving: compute the prompt, sample the first token, then
    end with finish_reason 'transfer' and hold the prompt's blocks for a decode
    engine to take (EngineCore.export_kv). A stop (EOS, stop token, max_tokens)
    at that first token ends it as usual, holding nothing."""
    arrival_time: float = msgspec.field(default_factory=time.time)
    """Wall-clock seconds when the caller received the request."""


class EngineCoreFinish(msgspec.Struct, frozen=True):
    """End requests before the core would: ``status`` is 'abort' (``cause``: an
    ABORT_REASONS key), 'stop' (the caller found a stop string) or 'error'
    (``cause``: the FAILURE_STAGES key where the caller failed it)."""

    request_ids: list[str]
    status: str
    cause: str | None = None


class EngineCoreOutput(msgspec.Struct):
    """One request's progress in one step: token ids only, no text."""

    request_id: str
    new_token_ids: list[int]
    finish_reason: str | None = None
    """None while running; then 'stop' (EOS or a stop token id), 'length' or 'error';
    'transfer' for a prefill-only request whose prompt is held for a decode engine."""
    stop_reason: int | None = None
    """The token id that stopped it (EOS or one of ``stop_token_ids``)."""
    num_cached_tokens: int = 0
    """Prompt tokens served from the prefix cache at its admission."""
    logprobs: list[TokenLogprob] | None = None
    """One entry per new token when the request asked for logprobs."""
    error: str | None = None
    """Why the core failed it (finish_reason 'error')."""
    prompt_logprobs: list[TokenLogprob] | None = None
    """params.prompt_logprobs: the entries of prompt tokens 1.. (the first has
    none), all of them, once, with the request's first output (the core holds
    them until then, so a request moved before it recomputes them and a client
    never gets a chunk twice)."""


class EngineCoreOutputs(msgspec.Struct):
    outputs: list[EngineCoreOutput]
    stats: EngineStats
    """The core's gauges and counters after this step (a router's load signal)."""
    kv_events: KVEventBatch | None = None
    """KV events drained this step, with sequence numbers; None: nobody subscribed."""
    timestamp: float = msgspec.field(default_factory=time.time)


def failure_message(stage: str, detail: str) -> str:
    """The error text a client sees for a request failed at ``stage``."""
    return f"the engine failed while {FAILURE_STAGES[stage]} this request ({detail})"


_encoder = msgspec.msgpack.Encoder()
_request_decoder = msgspec.msgpack.Decoder(EngineCoreRequest)
_finish_decoder = msgspec.msgpack.Decoder(EngineCoreFinish)
_outputs_decoder = msgspec.msgpack.Decoder(EngineCoreOutputs)


def encode(message: EngineCoreRequest | EngineCoreFinish | EngineCoreOutputs) -> bytes:
    return _encoder.encode(message)


def decode_request(data: bytes) -> EngineCoreRequest:
    """msgpack -> EngineCoreRequest; a bad SamplingParams field raises
    msgspec.ValidationError naming it."""
    return _request_decoder.decode(data)


def decode_finish(data: bytes) -> EngineCoreFinish:
    return _finish_decoder.decode(data)


def decode_outputs(data: bytes) -> EngineCoreOutputs:
    return _outputs_decoder.decode(data)
