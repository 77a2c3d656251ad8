"""The caller's side of the engine-core boundary, on the way out: the core's
token ids (EngineCoreOutput) -> text deltas (RequestOutput), with stop strings.

Text that could still turn out to be the start of a stop string is held back
(up to len(longest stop) - 1 characters), so a client never sees text that a
stop string later cuts off. The text of an EOS or stop token is not shown.

A stop string is found here, not in the core: the processor finishes the
request's output at once and lists the request in ``ProcessedOutputs.finish``
for the caller to end in the core (``EngineCore.finish_requests``). Outputs
that arrive for a request the processor no longer knows (the core ran a step
before it heard of the stop, or of an abort) are dropped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from tokenmill.engine.core_messages import EngineCoreOutput, EngineCoreRequest, failure_message
from tokenmill.engine.request import RequestStatus
from tokenmill.model.detokenizer import IncrementalDetokenizer
from tokenmill.outputs import RequestOutput, TokenLogprob

log = logging.getLogger(__name__)


class RequestTextState:
    """One request's text so far: an incremental detokenizer and the text held
    back for stop strings."""

    def __init__(self, request: EngineCoreRequest, tokenizer):
        self.request = request
        self.request_id = request.request_id
        params = request.params
        earlier = request.resume.output_token_ids if request.resume is not None else []
        # A resumed request's earlier output was delivered already: it is context here.
        self.detok = (IncrementalDetokenizer(tokenizer, list(request.prompt_token_ids) + list(earlier),
                                             params.skip_special_tokens)
                      if tokenizer is not None else None)
        self.stops = params.stop
        self.hold = max((len(s) for s in self.stops), default=1) - 1
        self.pending = ""
        self.num_prompt_tokens = len(request.prompt_token_ids)
        self.num_output_tokens = len(earlier)
        self.num_cached_tokens = 0
        self.prompt_logprobs_due = params.prompt_logprobs is not None and not earlier
        """Its prompt logprobs go on its first output from the core (a resumed
        request's went out with its earlier output)."""

    def process(self, new_ids: list[int], finish_reason: str | None, stop_reason,
                logprobs: list[TokenLogprob] | None) -> RequestOutput:
        """The delta for the tokens the core produced since the last call; a stop
        string found in the text ends it (finish_reason 'stop')."""
        self.num_output_tokens += len(new_ids)
        text_ids = new_ids
        if finish_reason == RequestStatus.FINISHED_STOPPED.value and new_ids and stop_reason == new_ids[-1]:
            text_ids = new_ids[:-1]  # the EOS / stop token itself has no text
        if self.detok is not None:
            self.pending += self.detok.step(text_ids)
            if finish_reason is not None:
                self.pending += self.detok.flush()
        text, stop_hit = self._take_text(final=finish_reason is not None)
        if stop_hit is not None:
            finish_reason, stop_reason = RequestStatus.FINISHED_STOPPED.value, stop_hit
        return RequestOutput(
            request_id=self.request_id,
            new_token_ids=list(new_ids),
            new_text=text,
            finished=finish_reason is not None,
            finish_reason=finish_reason,
            num_prompt_tokens=self.num_prompt_tokens,
            num_output_tokens=self.num_output_tokens,
            num_cached_tokens=self.num_cached_tokens,
            logprobs=logprobs,
            stop_reason=stop_reason if finish_reason is not None else None,
        )

    def prompt_logprobs(self, entries: list[TokenLogprob] | None) -> list[TokenLogprob | None] | None:
        """The first output's prompt logprobs, None for the first prompt token
        (the core sends prompt tokens 1.. with its first output); None afterwards."""
        if not self.prompt_logprobs_due:
            return None
        self.prompt_logprobs_due = False
        return [None, *(entries or [])]

    def failed(self, error: str) -> RequestOutput:
        return RequestOutput(
            request_id=self.request_id, new_token_ids=[], new_text="", finished=True,
            finish_reason=RequestStatus.FINISHED_ERROR.value, num_prompt_tokens=self.num_prompt_tokens,
            num_output_tokens=self.num_output_tokens, num_cached_tokens=self.num_cached_tokens, error=error)

    def _take_text(self, final: bool) -> tuple[str, str | None]:
        if self.stops:
            hit = _first_stop(self.pending, self.stops)
            if hit is not None:
                index, stop = hit
                text, self.pending = self.pending[:index], ""
                return text, stop
        if final or self.hold == 0:
            text, self.pending = self.pending, ""
        else:
            cut = max(len(self.pending) - self.hold, 0)
            text, self.pending = self.pending[:cut], self.pending[cut:]
        return text, None


@dataclass
class ProcessedOutputs:
    outputs: list[RequestOutput] = field(default_factory=list)
    finish: list[tuple[str, RequestStatus]] = field(default_factory=list)
    """(request id, status) the caller must end in the core: stop strings found
    here, and requests whose output processing failed while the core still runs them."""
    failed: list[str] = field(default_factory=list)
    """Requests whose output processing failed (the caller counts them: stage 'output')."""


class OutputProcessor:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.states: dict[str, RequestTextState] = {}

    def add(self, request: EngineCoreRequest) -> None:
        """Start a request's text state (may raise: nothing is registered then)."""
        self.states[request.request_id] = RequestTextState(request, self.tokenizer)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self.states

    def process(self, outputs: list[EngineCoreOutput]) -> ProcessedOutputs:
        done = ProcessedOutputs()
        for out in outputs:
            state = self.states.get(out.request_id)
            if state is None:
                continue  # ended on this side already (stop string, abort)
            state.num_cached_tokens = out.num_cached_tokens
            if out.error is not None:
                done.outputs.append(state.failed(out.error))
                del self.states[out.request_id]
                continue
            try:
                result = state.process(out.new_token_ids, out.finish_reason, out.stop_reason, out.logprobs)
                result.prompt_logprobs = state.prompt_logprobs(out.prompt_logprobs)
            except Exception as exc:  # detokenizer / stop strings: this request's problem only
                log.exception("output processing failed for request %s", out.request_id)
                result = state.failed(failure_message("output", f"{type(exc).__name__}: {exc}"))
                done.failed.append(out.request_id)
                if out.finish_reason is None:
                    done.finish.append((out.request_id, RequestStatus.FINISHED_ERROR))
            else:
                if result.finished and out.finish_reason is None:  # a stop string: the core still runs it
                    done.finish.append((out.request_id, RequestStatus.FINISHED_STOPPED))
            if result.finished:
                del self.states[out.request_id]
            done.outputs.append(result)
        return done

    def abort(self, request_id: str) -> tuple[RequestOutput | None, bool]:
        """End a request here (it is being aborted): its final output with the text
        still held back, or None if unknown. Returns (output, ok); ok is False when
        flushing its text raised (the output is then an error)."""
        state = self.states.pop(request_id, None)
        if state is None:
            return None, True
        try:
            return state.process([], RequestStatus.FINISHED_ABORTED.value, None, None), True
        except Exception as exc:
            log.exception("output processing failed for aborted request %s", request_id)
            return state.failed(failure_message("output", f"{type(exc).__name__}: {exc}")), False

    def fail(self, request_id: str, error: str) -> RequestOutput | None:
        """End a request here with an error (its engine is gone); None if unknown."""
        state = self.states.pop(request_id, None)
        return state.failed(error) if state is not None else None


def _first_stop(text: str, stops: tuple[str, ...]) -> tuple[int, str] | None:
    best = None
    for stop in stops:
        i = text.find(stop)
        if i != -1 and (best is None or i < best[0]):
            best = (i, stop)
    return best
