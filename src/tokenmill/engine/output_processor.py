"""Per-request text output: incremental detokenization and stop strings.

Text that could still turn out to be the start of a stop string is held back
(up to len(longest stop) - 1 characters), so a client never sees text that a
stop string later cuts off. The text of an EOS or stop token is not shown.
"""

from __future__ import annotations

from tokenmill.engine.request import Request, RequestStatus
from tokenmill.model.detokenizer import IncrementalDetokenizer
from tokenmill.outputs import RequestOutput, TokenLogprob


class RequestTextState:
    def __init__(self, request: Request, tokenizer):
        self.request = request
        params = request.params
        self.detok = (IncrementalDetokenizer(tokenizer, request.prompt_token_ids, params.skip_special_tokens)
                      if tokenizer is not None else None)
        self.stops = params.stop
        self.hold = max((len(s) for s in self.stops), default=1) - 1
        self.pending = ""
        self.emitted_tokens = 0

    def process(self, finished_status: RequestStatus | None,
                logprobs: list[TokenLogprob] | None) -> tuple[RequestOutput, str | None]:
        """Build the delta for the tokens appended since the last call. Returns
        (output, stop string hit or None). The caller finishes the request on a hit."""
        req = self.request
        new_ids = req.output_token_ids[self.emitted_tokens:]
        self.emitted_tokens += len(new_ids)
        text_ids = new_ids
        if finished_status is RequestStatus.FINISHED_STOPPED and req.stop_reason == (new_ids[-1] if new_ids else None):
            text_ids = new_ids[:-1]  # the EOS / stop token itself has no text
        stop_hit = None
        if self.detok is not None:
            self.pending += self.detok.step(text_ids)
            if finished_status is not None:
                self.pending += self.detok.flush()
        text, stop_hit = self._take_text(final=finished_status is not None)
        if stop_hit is not None:
            finished_status = RequestStatus.FINISHED_STOPPED
            req.stop_reason = stop_hit
        out = RequestOutput(
            request_id=req.request_id,
            new_token_ids=new_ids,
            new_text=text,
            finished=finished_status is not None,
            finish_reason=finished_status.value if finished_status is not None else None,
            num_prompt_tokens=req.num_prompt_tokens,
            num_output_tokens=req.num_output_tokens,
            num_cached_tokens=max(req.num_cached_tokens, 0),
            logprobs=logprobs,
            stop_reason=req.stop_reason if finished_status is not None else None,
        )
        return out, stop_hit

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


def _first_stop(text: str, stops: tuple[str, ...]) -> tuple[int, str] | None:
    best = None
    for stop in stops:
        i = text.find(stop)
        if i != -1 and (best is None or i < best[0]):
            best = (i, stop)
    return best
