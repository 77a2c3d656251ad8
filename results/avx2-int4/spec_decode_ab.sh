#!/bin/bash
# self-int4 at k=6 on this AVX2 CPU: old tree (torch's int4 kernel) vs new, new with int8 draft activations
cd /work/main
mkdir -p /tmp/spec
for round in 1 2; do
  PYTHONPATH=/tmp/old/src:/tmp/old .venv/bin/python -m benchmarks.spec_decode --one-engine --rounds 2 --speculative-config '{"method": "self-int4", "num_speculative_tokens": 6}' --json /tmp/spec/old_r$round.json 2>&1 | grep -v Loading | tail -4
  for act in float int8; do
    PYTHONPATH=src:. .venv/bin/python -m benchmarks.spec_decode --one-engine --rounds 2 --int4-activations $act --speculative-config '{"method": "self-int4", "num_speculative_tokens": 6}' --json /tmp/spec/new_${act}_r$round.json 2>&1 | grep -v Loading | tail -4
  done
done
