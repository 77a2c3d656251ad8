"""The ``tokenmill sim`` flags of disaggregated pools (``--disagg P:D``, the decode
replicas' ``--decode-*`` layout and batch limit, and our cluster's rule,
``--disagg-min-prefill-tokens`` and ``--disagg-max-prefill-queue``) as ``PoolSplit``
fields, each refused with a ValueError naming it where it cannot apply."""

from __future__ import annotations

import argparse

_DECODE_FLAGS = ("decode_tp", "decode_ep", "decode_attention_dp", "decode_max_num_seqs", "disagg_min_prefill_tokens",
                 "disagg_max_prefill_queue")
_LAYOUT_FLAGS = ("decode_tp", "decode_ep", "decode_attention_dp")
_RULE_FLAGS = ("disagg_min_prefill_tokens", "disagg_max_prefill_queue")


def decode_pool(args: argparse.Namespace, parallel) -> dict:
    """The --decode-* and --disagg-* rule flags as PoolSplit fields (empty when none is given);
    ValueError naming a flag given without --disagg P:D (the queue limit: without the rule too) or with
    an impossible value."""
    given = [f for f in _DECODE_FLAGS if getattr(args, f, None) is not None]
    if not given:
        return {}
    flag = "--" + given[0].replace("_", "-")
    if args.disagg == "auto" and args.search and set(given) <= set(_RULE_FLAGS):
        return split_rule(args)  # each split the search tries applies the rule
    if not args.disagg or args.disagg == "auto" or args.search:
        raise ValueError(f"{flag}: only with --disagg P:D and no --search (the search tries one layout and "
                         "batch limit for both pools; --search --disagg auto takes the rule's two flags)")
    from tokenmill.sim.cost import Parallel

    layout = None
    if any(f in _LAYOUT_FLAGS for f in given):
        attention_dp = parallel.attention_dp if args.decode_attention_dp is None else args.decode_attention_dp
        try:
            layout = Parallel(parallel.tp if args.decode_tp is None else args.decode_tp,
                              parallel.ep if args.decode_ep is None else args.decode_ep, attention_dp)
        except ValueError as e:
            raise ValueError(f"--decode-tp/--decode-ep: {e}") from None
    return {"decode_parallel": layout, "decode_max_num_seqs": args.decode_max_num_seqs, **split_rule(args)}


def split_rule(args: argparse.Namespace) -> dict:
    """--disagg-min-prefill-tokens and --disagg-max-prefill-queue as PoolSplit fields (the queue
    limit's default is PoolSplit's); ValueError for the queue limit without the rule."""
    if args.disagg_max_prefill_queue is not None and args.disagg_min_prefill_tokens is None:
        raise ValueError("--disagg-max-prefill-queue: only with --disagg-min-prefill-tokens (the rule it is part of)")
    queue = {} if args.disagg_max_prefill_queue is None else {"max_prefill_queue": args.disagg_max_prefill_queue}
    return {"min_prefill_tokens": args.disagg_min_prefill_tokens, **queue}


def parse_disagg(text: str | None, decode: dict | None = None):
    """``--disagg P:D`` -> PoolSplit (None when not given), with ``decode``'s PoolSplit fields
    (the decode replicas' own layout and batch limit); ValueError naming the flag."""
    if text is None:
        return None
    from tokenmill.sim.disagg import PoolSplit

    try:
        prefill, decode_replicas = (int(v) for v in text.split(":"))
    except ValueError:
        raise ValueError(f"--disagg: expected P:D (prefill and decode replicas, e.g. 1:3), got {text!r}") from None
    try:
        return PoolSplit(prefill, decode_replicas, **(decode or {}))
    except ValueError as e:
        raise ValueError(f"--disagg: {e}") from None
