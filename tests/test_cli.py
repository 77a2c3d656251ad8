"""The ``tokenmill`` command line: help texts, flag mapping, and a real ``generate`` run."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tokenmill.cli import build_parser, load_prompts
from tokenmill.cli_args import engine_config_from_args


def _run(*args: str, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tokenmill.cli", *args], check=False, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("args,flags", [
    ((), ("serve", "generate")),
    (("serve",), ("--model", "--host", "--port", "--api-key", "--max-body-bytes", "--max-tokens-limit",
                  "--enable-prefix-caching", "--no-enable-prefix-caching", "--no-enable-chunked-prefill",
                  "--max-waiting-requests",
                  "--kv-cache-memory-gib", "--served-model-name", "--quantization", "--log-level",
                  "--timeout-keep-alive")),
    (("generate",), ("--prompts-file", "--chat", "--max-tokens", "--temperature", "--top-p", "--top-k",
                     "--seed", "--stop", "--model", "--dtype")),
])
def test_help(args, flags):
    result = _run(*args, "--help", timeout=60)
    assert result.returncode == 0, result.stderr
    for flag in flags:
        assert flag in result.stdout


def test_console_script_help():
    script = shutil.which("tokenmill", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the tokenmill console script is not installed next to this interpreter")
    result = subprocess.run([script, "--help"], check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "serve" in result.stdout and "generate" in result.stdout


def test_flags_map_onto_engine_config():
    args = build_parser().parse_args([
        "serve", "--model", "dummy:tiny", "--load-format", "dummy", "--dtype", "float32", "--max-model-len", "256",
        "--num-kv-blocks", "32", "--block-size", "8", "--no-enable-prefix-caching", "--no-enable-chunked-prefill",
        "--max-waiting-requests", "4",
        "--max-num-seqs", "3", "--seed", "9", "--port", "0", "--quantization", "int4", "--int4-activations", "float"])
    config = engine_config_from_args(args)
    assert (config.quantization, config.int4_activations) == ("int4", "float")
    assert (config.model, config.load_format, config.dtype) == ("dummy:tiny", "dummy", "float32")
    assert (config.max_model_len, config.num_kv_blocks, config.block_size) == (256, 32, 8)
    assert config.enable_prefix_caching is False and config.enable_chunked_prefill is False
    assert engine_config_from_args(build_parser().parse_args(["serve"])).enable_chunked_prefill is True
    assert (config.max_waiting_requests, config.max_num_seqs, config.seed) == (4, 3, 9)
    assert args.host == "127.0.0.1" and args.port == 0


def test_bad_flag_value_exits_nonzero_without_traceback():
    result = _run("serve", "--block-size", "0", "--port", "0", timeout=60)
    assert result.returncode != 0
    assert "block_size" in result.stderr and "Traceback" not in result.stderr


def test_bad_keep_alive_names_the_flag():
    result = _run("serve", "--timeout-keep-alive", "0", "--port", "0", timeout=60)
    assert result.returncode != 0
    assert "timeout_keep_alive" in result.stderr and "Traceback" not in result.stderr


def test_load_prompts_file_formats(tmp_path):
    path = tmp_path / "prompts.jsonl"
    lines = ["plain text prompt", json.dumps({"prompt": "json prompt"}), "",
             json.dumps({"messages": [{"role": "user", "content": "chat"}]})]
    path.write_text("\n".join(lines) + "\n")
    items = load_prompts(["arg prompt"], str(path), chat=False)
    assert items == ["arg prompt", "plain text prompt", "json prompt", [{"role": "user", "content": "chat"}]]
    chat_items = load_prompts(["hi"], None, chat=True)
    assert chat_items == [[{"role": "user", "content": "hi"}]]


def test_generate_prints_text_and_summary(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    chat = {"messages": [{"role": "user", "content": "Say hi."}]}
    prompts.write_text("The capital of France is\n" + json.dumps(chat) + "\n")
    result = _run("generate", "Hello", "--prompts-file", str(prompts), "--max-tokens", "4", "--temperature", "0",
                  "--num-kv-blocks", "64", "--num-threads", "1")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    headers = [line for line in out.splitlines() if line.startswith("--- [")]
    assert len(headers) == 3 and "'Hello'" in headers[0] and "'The capital of France is'" in headers[1]
    assert "Say hi." in headers[2]
    completions = [line for line in out.splitlines() if not line.startswith(("--- [", "requests:"))]
    assert any(line.strip() for line in completions), out
    summary = out.strip().splitlines()[-1]
    assert re.fullmatch(r"requests: 3, output tokens: \d+, seconds: [\d.]+, tok/s: [\d.]+", summary), summary
    assert int(summary.split("output tokens: ")[1].split(",")[0]) > 0
