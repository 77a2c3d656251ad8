"""``tokenmill bench`` workload flags, and the workload they describe.

Every flag defaults to None, meaning "the workload's own default" (the spec
dataclasses hold the defaults). A flag the chosen workload does not use is an
error rather than silently ignored, and errors name the flag. No heavy
imports: ``--help`` must not load torch.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tokenmill.bench.workload import Workload
from tokenmill.bench.workloads.jsonl import JsonlSpec, load_jsonl
from tokenmill.bench.workloads.lengths import LENGTH_DISTS
from tokenmill.bench.workloads.multi_turn import MultiTurnSpec, build_multi_turn
from tokenmill.bench.workloads.sharegpt import ShareGPTSpec, load_sharegpt
from tokenmill.bench.workloads.shared_prefix import SharedPrefixSpec, build_shared_prefix
from tokenmill.bench.workloads.synthetic import SyntheticSpec, build_synthetic

if TYPE_CHECKING:
    from tokenmill.model.tokenizer import Tokenizer

WORKLOADS = ("synthetic", "shared-prefix", "multi-turn", "jsonl", "sharegpt")
DEFAULT_WORKLOAD = "synthetic"  # with SyntheticSpec's defaults; the reasons are in its docstring


@dataclass(frozen=True)
class _Kind:
    fields: dict[str, str]
    """Spec field -> the args attribute (flag) that sets it."""
    build: Callable[..., Workload]
    """(tokenizer, spec kwargs, max_model_len) -> Workload."""
    needs_dataset: bool = False


_KINDS = {
    "synthetic": _Kind(
        {"num_samples": "num_samples", "input_len": "input_len", "output_len": "output_len",
         "length_dist": "length_dist", "range_ratio": "range_ratio", "seed": "workload_seed"},
        lambda tok, kw, max_len: build_synthetic(tok, SyntheticSpec(**kw), max_len)),
    "shared-prefix": _Kind(
        {"num_prefixes": "num_prefixes", "questions_per_prefix": "questions_per_prefix", "prefix_len": "prefix_len",
         "question_len": "input_len", "output_len": "output_len", "seed": "workload_seed"},
        lambda tok, kw, max_len: build_shared_prefix(tok, SharedPrefixSpec(**kw), max_len)),
    "multi-turn": _Kind(
        {"num_conversations": "num_conversations", "turns": "turns", "user_len": "input_len",
         "output_len": "output_len", "seed": "workload_seed"},
        lambda tok, kw, max_len: build_multi_turn(tok, MultiTurnSpec(**kw), max_len)),
    "jsonl": _Kind(
        {"path": "dataset", "num_samples": "num_samples", "default_max_tokens": "output_len"},
        lambda tok, kw, max_len: load_jsonl(tok, JsonlSpec(**kw), max_len), needs_dataset=True),
    "sharegpt": _Kind(
        {"path": "dataset", "num_samples": "num_samples", "max_output_len": "max_output_len",
         "seed": "workload_seed"},
        lambda tok, kw, max_len: load_sharegpt(tok, ShareGPTSpec(**kw), max_len), needs_dataset=True),
}
_DESTS = ("dataset", "num_samples", "input_len", "output_len", "length_dist", "range_ratio", "prefix_len",
          "num_prefixes", "questions_per_prefix", "num_conversations", "turns", "max_output_len", "workload_seed")


def add_workload_args(parser: argparse.ArgumentParser) -> None:
    syn, sp, mt, sg = SyntheticSpec(), SharedPrefixSpec(), MultiTurnSpec(), ShareGPTSpec("")
    g = parser.add_argument_group(
        "workload", f"What the benchmark sends. Without workload flags: synthetic, {syn.num_samples} text prompts "
                    f"of ~{syn.input_len} tokens asking for ~{syn.output_len} each ({syn.length_dist} "
                    f"+-{syn.range_ratio:.0%}), seed {syn.seed}: sized for the embedded model on a small CPU.")
    g.add_argument("--workload", choices=WORKLOADS, default=None,
                   help="synthetic: seeded random-word text prompts; shared-prefix: long system prompts shared by "
                        "many questions (prefix caching, KV-aware routing); multi-turn: growing conversations; "
                        "jsonl: a file of OpenAI requests; sharegpt: ShareGPT conversations "
                        f"(default {DEFAULT_WORKLOAD})")
    g.add_argument("--dataset", default=None, metavar="PATH",
                   help="jsonl: one request per line, {\"messages\": [...]} or {\"prompt\": \"...\"} with optional "
                        "max_tokens / max_completion_tokens; sharegpt: a JSON list or JSON Lines of "
                        "{\"conversations\": [...]}")
    g.add_argument("--num-samples", type=int, default=None, metavar="N",
                   help=f"synthetic: samples (default {syn.num_samples}); jsonl: at most the first N requests "
                        f"(default all); sharegpt: at most N conversations, seeded (default {sg.num_samples})")
    g.add_argument("--input-len", type=int, default=None, metavar="TOKENS",
                   help=f"synthetic: mean prompt length (default {syn.input_len}); shared-prefix: question length "
                        f"(default {sp.question_len}); multi-turn: user message length (default {mt.user_len})")
    g.add_argument("--output-len", type=int, default=None, metavar="TOKENS",
                   help=f"max_tokens: synthetic mean (default {syn.output_len}); shared-prefix (default "
                        f"{sp.output_len}); multi-turn (default {mt.output_len}); jsonl: for requests without one "
                        f"(default {JsonlSpec('').default_max_tokens})")
    g.add_argument("--length-dist", choices=LENGTH_DISTS, default=None,
                   help="synthetic: shape of both length distributions: fixed (the mean), uniform "
                        "(mean*(1+-r)), normal (sd r*mean, within 1..2*mean-1), lognormal (coefficient of "
                        f"variation r, right-skewed like real chats) (default {syn.length_dist})")
    g.add_argument("--range-ratio", type=float, default=None, metavar="R",
                   help=f"synthetic: the spread r of --length-dist (default {syn.range_ratio:g}; uniform: 0..1)")
    g.add_argument("--prefix-len", type=int, default=None, metavar="TOKENS",
                   help=f"shared-prefix: system prompt length (default {sp.prefix_len})")
    g.add_argument("--num-prefixes", type=int, default=None, metavar="N",
                   help=f"shared-prefix: distinct system prompts (default {sp.num_prefixes})")
    g.add_argument("--questions-per-prefix", type=int, default=None, metavar="N",
                   help=f"shared-prefix: questions after each system prompt (default {sp.questions_per_prefix})")
    g.add_argument("--num-conversations", type=int, default=None, metavar="N",
                   help=f"multi-turn: conversations (default {mt.num_conversations})")
    g.add_argument("--turns", type=int, default=None, metavar="N",
                   help=f"multi-turn: user turns per conversation, one sample each (default {mt.turns})")
    g.add_argument("--max-output-len", type=int, default=None, metavar="TOKENS",
                   help=f"sharegpt: cap on max_tokens, which is the reference answer's length "
                        f"(default {sg.max_output_len})")
    g.add_argument("--workload-seed", type=int, default=None, metavar="SEED",
                   help=f"seed of the generated text and lengths, and of sharegpt's subsample (default {syn.seed})")


def build_workload(args: argparse.Namespace, tokenizer: Tokenizer | None,
                   max_model_len: int | None = None) -> Workload:
    """The workload the flags describe. ValueError naming the flag for a bad or
    inapplicable value, a missing --dataset, or a sample longer than max_model_len."""
    name = getattr(args, "workload", None) or DEFAULT_WORKLOAD
    if name not in _KINDS:
        raise ValueError(f"--workload: must be one of {WORKLOADS}, got {name!r}")
    kind = _KINDS[name]
    used = set(kind.fields.values())
    for dest in _DESTS:
        if getattr(args, dest, None) is not None and dest not in used:
            raise ValueError(f"{_flag(dest)}: does not apply to --workload {name} "
                             f"(it takes {', '.join(sorted(_flag(d) for d in used))})")
    if kind.needs_dataset and getattr(args, "dataset", None) is None:
        raise ValueError(f"--dataset: --workload {name} reads a file: pass --dataset PATH")
    if tokenizer is None:
        raise ValueError(f"--workload: {name} needs a tokenizer to write its prompts and this model has none "
                         "(dummy weights): pass --tokenizer")
    kwargs = {field: value for field, dest in kind.fields.items() if (value := getattr(args, dest, None)) is not None}
    with _errors_name_flags(kind.fields):
        return kind.build(tokenizer, kwargs, max_model_len)


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


@contextmanager
def _errors_name_flags(fields: dict[str, str]):
    """Rewrite a spec's 'field: message' ValueError as '--flag: message'."""
    names = {**{d: _flag(d) for d in fields.values()}, **{f: _flag(d) for f, d in fields.items()}}
    try:
        yield
    except ValueError as exc:
        field, sep, message = str(exc).partition(": ")
        if sep and field in names:
            raise ValueError(f"{names[field]}: {message}") from exc
        raise
