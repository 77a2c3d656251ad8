"""Reading a whole answer from an EngineClient (in-process or cluster) in tests."""

from __future__ import annotations


async def collect(engine, prompt, params, request_id=None):
    """-> (every token id of the answer, its final RequestOutput)."""
    tokens, final = [], None
    async for out in engine.generate(prompt, params, request_id):
        tokens += out.new_token_ids
        final = out
    return tokens, final
