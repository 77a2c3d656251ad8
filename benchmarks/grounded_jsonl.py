"""Write the input-grounded prompts of benchmarks/spec_decode.py as a JSON Lines
workload for ``tokenmill bench --workload jsonl``: chat requests whose answers
copy from their prompts (repeat or lightly edit a paragraph, edit a function),
where speculative decoding's drafts are accepted most. Used for the
Interactive-scenario runs of docs/PERFORMANCE.md.

    python -m benchmarks.grounded_jsonl --out results/spec/grounded.jsonl --max-tokens 64
    tokenmill bench --scenario interactive --workload jsonl --dataset results/spec/grounded.jsonl ...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.spec_decode import CODE_EDITS, GROUNDED


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the .jsonl file to write")
    ap.add_argument("--max-tokens", type=int, default=64, help="max_completion_tokens of every request")
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as f:
        for text in GROUNDED + CODE_EDITS:
            f.write(json.dumps({"messages": [{"role": "user", "content": text}],
                                "max_completion_tokens": args.max_tokens}) + "\n")
    print(f"{len(GROUNDED) + len(CODE_EDITS)} requests -> {args.out}")


if __name__ == "__main__":
    main()
