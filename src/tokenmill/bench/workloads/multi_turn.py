"""Multi-turn workload: conversations whose every turn is one sample.

Turn k of a conversation (k = 1..turns) is the conversation so far -- its
first k user messages with an assistant reply after each earlier one -- and
asks for the next reply. LoadGen issues samples independently, so earlier
replies cannot be the model's own: they are synthetic text of ``output_len``
tokens, what the model was asked to produce. Turn k+1's messages extend turn
k's, so with a template that renders past turns unchanged (ChatML, Llama-3)
its prompt extends turn k's prompt token for token: the history is a cached
prefix for an engine that kept it. ``group`` names the conversation.

Order: turn-major (every conversation's turn 1, then every turn 2, ...), the
order in which a live chat service receives them. Accuracy mode issues this
order; LoadGen's performance mode draws its own.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from tokenmill.bench.workload import Workload
from tokenmill.bench.workloads.samples import chat_sample, check_fits, positive_int, require_int
from tokenmill.bench.workloads.text import WordSource

if TYPE_CHECKING:
    from tokenmill.model.tokenizer import Tokenizer


@dataclass(frozen=True)
class MultiTurnSpec:
    num_conversations: int = 16
    turns: int = 4
    user_len: int = 64
    """Tokens of each user message."""
    output_len: int = 64
    """max_tokens of every turn, and the length of the synthetic earlier replies."""
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("num_conversations", "turns", "user_len", "output_len"):
            positive_int(name, getattr(self, name))
        require_int("seed", self.seed)


def build_multi_turn(tokenizer: Tokenizer, spec: MultiTurnSpec = MultiTurnSpec(),
                     max_model_len: int | None = None) -> Workload:
    words = WordSource.from_tokenizer(tokenizer)
    rng = random.Random(f"{spec.seed}/multi-turn")
    # histories[c]: user, assistant, user, assistant, ..., user (2 * turns - 1 messages)
    histories = []
    for _ in range(spec.num_conversations):
        history = []
        for turn in range(spec.turns):
            if turn:
                history.append({"role": "assistant", "content": words.text(rng, spec.output_len)[0]})
            history.append({"role": "user", "content": words.text(rng, spec.user_len)[0]})
        histories.append(history)
    samples = []
    for turn in range(spec.turns):
        for c, history in enumerate(histories):
            samples.append(chat_sample(len(samples), tokenizer, history[:2 * turn + 1], spec.output_len,
                                       group=f"conversation-{c}"))
    check_fits(samples, max_model_len, "turns")
    description = (f"{spec.num_conversations} conversations x {spec.turns} turns, user messages of "
                   f"{spec.user_len} tokens, replies of {spec.output_len}, turn-major, seed {spec.seed}")
    return Workload("multi-turn", samples, description, params={"workload": "multi-turn", **asdict(spec)})
