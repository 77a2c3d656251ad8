"""Run the API under uvicorn on a socket we bind ourselves.

Binding first means ``--port 0`` works: the kernel picks a free port and the
banner prints the real URL before the server starts accepting.
"""

from __future__ import annotations

import logging
import socket
from collections import Counter
from dataclasses import dataclass

import uvicorn

from tokenmill.config import EngineConfig
from tokenmill.engine.gc_heap import freeze_startup_heap, unfreeze_heap
from tokenmill.engine.step_log import StepLogFile
from tokenmill.serve.api import DEFAULT_MAX_BODY_BYTES, build_app
from tokenmill.serve.tools import ToolConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_tokens_limit: int | None = None
    stream_interval: int = 1
    """Tokens per SSE event of a streamed answer (the first token goes at once)."""
    log_level: str = "info"
    shutdown_timeout_s: float = 30.0
    """Drain on SIGTERM/SIGINT: uvicorn stops accepting and waits this long for
    in-flight requests (streams included) before it cancels them."""
    timeout_keep_alive_s: float = 5.0
    """An idle client connection is closed after this long (uvicorn's default)."""
    cluster: object | None = None
    """cluster.launch.ClusterOptions; with workers > 1 the engine is a ClusterEngine on Ray."""
    tool_config: ToolConfig | None = None
    """--enable-auto-tool-choice / --tool-call-parser."""
    reasoning_parser: str | None = None
    """--reasoning-parser."""
    step_log: str | None = None
    """--step-log: a file the in-process engine appends each step to (engine/step_log.py); a
    cluster's workers each append to it plus ``.`` and the worker's name."""


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if sock.family == socket.AF_INET6 else f"http://{host}:{port}"


def banner(engine, url: str) -> str:
    inner = getattr(engine, "engine", None)  # the LLMEngine behind an AsyncEngine
    core = inner.core if inner is not None else None
    config = core.config if core is not None else None
    lines = [f"model:         {engine.model_name}"]
    if core is not None:
        lines += [f"device:        {core.device}", f"dtype:         {str(core.dtype).removeprefix('torch.')}",
                  f"attention:     {core.attention_backend}", f"fused ops:     {core.fused_ops}",
                  f"linears:       {core.linear_backend}",
                  f"layer loop:    {core.decoder_loop}",
                  f"deterministic: {'on (batch-invariant kernels)' if config.deterministic else 'off'}",
                  (f"KV cache:      {config.num_kv_blocks} blocks x {config.block_size} tokens = "
                   f"{config.num_kv_blocks * config.block_size} tokens")]
    workers = getattr(engine, "workers", None)  # a ClusterEngine
    if workers is not None:
        roles = Counter(h.info.role for h in workers.values())
        kinds = ", ".join(f"{n} {role}" for role, n in roles.items())
        lines.append(f"workers:       {kinds} on Ray, router {engine.router.config.policy}")
        if engine.disagg is not None:
            d = engine.disagg
            lines.append(f"disaggregated: prompts of >= {max(d.min_prefill_tokens, 1)} uncached tokens to prefill "
                         f"workers (up to {d.max_prefill_queue} in flight each), KV over {engine.kv_transport}")
    lines += [f"max_model_len: {engine.max_model_len}", f"listening on {url}"]
    return "\n".join(lines)


def serve(config: EngineConfig, options: ServerOptions) -> None:
    """Load the engine, bind, serve until interrupted, then stop the engine.

    Shutdown order: uvicorn closes the listening socket, in-flight requests
    run to completion (``shutdown_timeout_s`` at most; those still running then
    are cancelled, which aborts them in the engine), and only then is the
    engine stopped (a cluster's workers killed, a Ray instance it started shut
    down)."""
    from tokenmill.engine.async_engine import AsyncEngine

    clustered = options.cluster is not None and options.cluster.is_cluster
    # The in-process engine's log opens here, failing fast on a bad path; a cluster's workers open
    # theirs (FILE.worker-0, ...) on their own nodes.
    step_log = StepLogFile(options.step_log) if options.step_log and not clustered else None
    sock = bind_socket(options.host, options.port)  # fail fast, before loading weights
    if clustered:
        from tokenmill.cluster.launch import start_cluster
        engine = start_cluster(config, options.cluster, step_log=options.step_log)
    else:
        engine = AsyncEngine.from_config(config)
        engine.step_log = step_log
    freeze_startup_heap()  # the loaded engine out of every full collection's walk (engine/gc_heap.py)
    try:
        app = build_app(engine, api_key=options.api_key, max_body_bytes=options.max_body_bytes,
                        max_tokens_limit=options.max_tokens_limit, stream_interval=options.stream_interval,
                        tool_config=options.tool_config, reasoning_parser=options.reasoning_parser)
        print(banner(engine, url_of(sock)), flush=True)
        uv_config = uvicorn.Config(app, log_level=options.log_level,
                                   timeout_graceful_shutdown=options.shutdown_timeout_s,
                                   timeout_keep_alive=options.timeout_keep_alive_s)
        uvicorn.Server(uv_config).run(sockets=[sock])
    finally:
        engine.shutdown()
        unfreeze_heap()
        sock.close()
        if step_log is not None:
            step_log.close()
