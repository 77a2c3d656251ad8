"""``tokenmill serve``, ``tokenmill generate`` and ``tokenmill bench``.

Heavy modules (torch, FastAPI) are imported inside the commands so that
``--help`` answers at once.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from tokenmill.bench.cli_args import add_bench_args
from tokenmill.bench.workloads.args import add_workload_args
from tokenmill.cli_args import (
    add_cluster_args,
    add_engine_args,
    add_generate_args,
    add_server_args,
    check_server_args,
    cluster_options_from_args,
    engine_config_from_args,
)
from tokenmill.sim.cli import cmd_sim
from tokenmill.sim.cli_args import add_sim_args

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # the shell's code for SIGINT


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tokenmill", description="tokenmill: an LLM serving stack.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{serve,generate,bench,sim}")
    serve = sub.add_parser("serve", help="run the OpenAI-compatible HTTP server",
                           description="Serve a model over an OpenAI-compatible HTTP API "
                                       "(/v1/chat/completions, /v1/completions, /v1/models, /health, /metrics).")
    add_engine_args(serve)
    add_server_args(serve)
    add_cluster_args(serve)
    serve.set_defaults(func=cmd_serve)
    generate = sub.add_parser("generate", help="complete prompts offline and print the results",
                              description="Complete prompts in one batch with the engine and print each result "
                                          "and a throughput summary.")
    add_engine_args(generate)
    add_generate_args(generate)
    generate.set_defaults(func=cmd_generate)
    bench = sub.add_parser("bench", help="MLPerf scenarios (LoadGen) against the engine or any OpenAI endpoint",
                           description="Run MLPerf LoadGen scenarios (offline, server, interactive, singlestream) "
                                       "against the in-process engine (no --url; the model and engine flags apply) "
                                       "or OpenAI-compatible servers (--url), report tokens/s, TTFT/TPOT "
                                       "percentiles, LoadGen's verdict, goodput and cost; save results.json, "
                                       "LoadGen's logs and plots under --output-dir.")
    add_engine_args(bench)
    add_bench_args(bench)
    add_workload_args(bench)
    bench.set_defaults(func=cmd_bench)
    sim = sub.add_parser("sim", help="predict a deployment's throughput, latency and cost (no model is run)",
                         description="Simulate our engine's scheduler over a cost model of each step on a hardware "
                                     "profile: tokens/s (per GPU), TTFT/TPOT percentiles, peak Server QPS, cost. "
                                     "`tokenmill sim validate` compares it with published results: most rows of "
                                     "TensorRT-LLM's tables and DeepSeek-R1's and Llama-3.1-405B's MLPerf v6.0 rows "
                                     "within 25%, their v5.1 GB300 rack rows too; NVIDIA's DeepSeek-R1 GB300 rack "
                                     "Server run, the Interactive rows but two, Llama-3.1-8B's Blackwell Offline "
                                     "rows, "
                                     "DeepSeek-R1's long answers on Blackwell and a third of gpt-oss's rows not "
                                     "(docs/SIMULATOR.md). "
                                     "`tokenmill sim calibrate` fits a this-machine profile to the engine here.")
    add_sim_args(sim)
    sim.set_defaults(func=cmd_sim)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = "DEBUG" if args.log_level == "trace" else args.log_level.upper()
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if args.log_level != "trace":
        # httpx logs every request at INFO: a benchmark would print one line per query.
        logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLevelName(level)))
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, OSError) as exc:  # bad flags, files or ports: no traceback
        print(f"tokenmill {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C: uvicorn re-raises it after its graceful shutdown
        return EXIT_INTERRUPTED


def cmd_serve(args: argparse.Namespace) -> int:
    from tokenmill.serve.server import ServerOptions, serve
    from tokenmill.serve.tools import ToolConfig

    check_server_args(args)
    config = engine_config_from_args(args)
    options = ServerOptions(host=args.host, port=args.port, api_key=args.api_key,
                            max_body_bytes=args.max_body_bytes, max_tokens_limit=args.max_tokens_limit,
                            stream_interval=args.stream_interval, log_level=args.log_level,
                            shutdown_timeout_s=args.shutdown_timeout,
                            timeout_keep_alive_s=args.timeout_keep_alive,
                            cluster=cluster_options_from_args(args),
                            tool_config=ToolConfig(args.enable_auto_tool_choice, args.tool_call_parser),
                            reasoning_parser=args.reasoning_parser, step_log=args.step_log)
    serve(config, options)
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from tokenmill.engine.engine import LLMEngine
    from tokenmill.sampling_params import SamplingParams

    items = load_prompts(args.prompts, args.prompts_file, args.chat)
    if not items:
        raise ValueError("prompts: give prompts as arguments or with --prompts-file")
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                            top_k=args.top_k, seed=args.seed, stop=tuple(args.stop or ()),
                            ignore_eos=args.ignore_eos)
    engine = LLMEngine(engine_config_from_args(args))
    prompts = [render_prompt(engine.tokenizer, item) for item in items]
    start = time.perf_counter()
    results = engine.generate(prompts, params, use_tqdm=True)
    elapsed = time.perf_counter() - start
    for i, (item, result) in enumerate(zip(items, results, strict=True)):
        shown = item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)
        print(f"--- [{i}] {shown!r} ({result.finish_reason})")
        print(result.text)
    tokens = sum(len(r.token_ids) for r in results)
    print(f"requests: {len(results)}, output tokens: {tokens}, seconds: {elapsed:.2f}, "
          f"tok/s: {tokens / elapsed if elapsed > 0 else 0.0:.1f}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from tokenmill.bench.command import cmd_bench as run

    return run(args)


def load_prompts(arguments: list[str], path: str | None, chat: bool) -> list[str | list[dict]]:
    """Text prompts (str) and chat conversations (list of messages)."""
    items: list[str | list[dict]] = list(arguments)
    if path is not None:
        with open(path, encoding="utf-8") as f:
            items += [_parse_line(line, path, n) for n, line in enumerate(f, 1) if line.strip()]
    if chat:
        items = [[{"role": "user", "content": x}] if isinstance(x, str) else x for x in items]
    return items


def _parse_line(line: str, path: str, number: int) -> str | list[dict]:
    text = line.rstrip("\n")
    if not text.lstrip().startswith("{"):
        return text
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"prompts_file: {path}:{number}: invalid JSON: {exc}") from exc
    if isinstance(record.get("messages"), list):
        return record["messages"]
    if isinstance(record.get("prompt"), str):
        return record["prompt"]
    raise ValueError(f"prompts_file: {path}:{number}: expected {{\"prompt\": str}} or {{\"messages\": [...]}}")


def render_prompt(tokenizer, item: str | list[dict]) -> str | list[int]:
    """Text prompts go to the engine as text; chats as token ids of the templated
    text, encoded without special tokens because the template writes its own BOS."""
    if isinstance(item, str):
        return item
    if tokenizer is None:
        raise ValueError("chat: this model has no tokenizer (dummy weights)")
    text = tokenizer.apply_chat_template(item, add_generation_prompt=True)
    return tokenizer.encode(text, add_special_tokens=False)


if __name__ == "__main__":
    sys.exit(main())
