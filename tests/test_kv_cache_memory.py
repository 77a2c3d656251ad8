"""The CPU KV cache is zeroed by the kernel, lazily: allocating it costs no
resident memory, writing a block backs that block, and freeing it returns
the memory (model/kv_cache_spec.py, allocate_kv_caches)."""

import gc

import torch

from tokenmill.model.kv_cache_spec import KVCacheSpec, allocate_kv_caches

MIB = 1 << 20
SPEC = KVCacheSpec(num_layers=2, parts=("k", "v"), num_heads=4, head_dim=64)  # 1 KiB per token per layer (bf16)
NUM_BLOCKS, BLOCK_SIZE = 8192, 16  # 128 MiB per layer, 256 MiB in all


def anon_resident() -> int:
    """This process's resident anonymous memory, in bytes (Linux)."""
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("RssAnon:"))
    return int(line.split()[1]) * 1024


def test_cpu_cache_reads_zero_and_costs_memory_only_where_written():
    before = anon_resident()
    caches = allocate_kv_caches(SPEC, NUM_BLOCKS, BLOCK_SIZE, torch.device("cpu"), torch.bfloat16)
    assert sum(c.numel() * c.element_size() for c in caches) == 256 * MIB
    assert anon_resident() - before < 32 * MIB  # torch.zeros would make all 256 MiB resident here
    assert all(c.shape == (NUM_BLOCKS, 2, 4, BLOCK_SIZE, 64) and c.is_contiguous() for c in caches)
    assert all(int(c.count_nonzero()) == 0 for c in caches)  # reading every page backs none of them
    assert anon_resident() - before < 32 * MIB

    caches[0][100:1100] = 1.5  # 1,000 blocks of layer 0, 16 KiB each: 15.6 MiB
    held = anon_resident()
    assert 15 * MIB <= held - before < 48 * MIB
    # Checked without large temporaries, which the allocator may keep resident after they are freed.
    written = caches[0][100:1100]
    assert int(written.count_nonzero()) == written.numel() and caches[0][[100, 600, 1099]].eq(1.5).all()
    assert int(caches[0][:100].count_nonzero()) == 0 and int(caches[1].count_nonzero()) == 0  # layers are apart

    del caches, written
    gc.collect()
    assert held - anon_resident() >= 15 * MIB  # the written blocks go back to the system with the tensor
