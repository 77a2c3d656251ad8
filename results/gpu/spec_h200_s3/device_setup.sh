# device call 1: wheels the image lacks, the GGUF's first half and the workload to /tmp (kept while warm)
set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/a/whl/*.whl
mkdir -p /tmp/m && cp .gpu/a/gguf.part00 .gpu/a/grounded.jsonl /tmp/m/
nvidia-smi -L; nproc; python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())"
lscpu | grep "Model name"
