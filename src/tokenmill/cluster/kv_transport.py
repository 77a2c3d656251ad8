"""How KV blocks travel from a prefill worker to a decode worker.

The frontend orchestrates a transfer but never touches the bytes: the prefill
worker ``publish``es the blocks it exports and returns a handle, the frontend
forwards the handle to the decode worker, which ``fetch``es the blocks and
writes them into its cache (engine/kv_transfer.py). A transport is the pair
publish / fetch.

``RayObjectStoreTransport`` (the one implemented, CPU): the payload is put in
Ray's object store; on one node the decode worker reads it zero-copy from
shared memory (the numpy array in the payload maps the store's buffer), across
nodes Ray moves the bytes. The handle is a one-element list holding the
ObjectRef: Ray resolves a ref passed as a task argument, but not one nested in
a list, so the bytes skip the frontend. The object is owned by the prefill
worker: if it dies before the fetch, the fetch fails and the frontend falls
back to a local prefill.

GPU plan (not built; no GPU has been lent to this project): the same two
calls over a device-to-device path with Ray Direct Transport (RDT, alpha in
Ray): the prefill worker returns the block tensors from a method declared
``@ray.method(tensor_transport="nccl")`` (after
``ray.experimental.collective.create_collective_group`` over the prefill and
decode actors) or ``"nixl"`` (RDMA, no group), so they stay in GPU memory
until the decode worker's task reads them, device to device. ``publish``
becomes that method's ref, ``fetch`` the read; the frontend's orchestration,
the hash-based "send only what is missing" rule and the layout check stay as
they are.
"""

from __future__ import annotations

from typing import Protocol

from tokenmill.engine.kv_transfer import KVBlocks


class KVTransport(Protocol):
    name: str

    def publish(self, blocks: KVBlocks) -> list:
        """On the prefill worker: make the blocks fetchable; returns the handle the frontend forwards."""

    async def fetch(self, handle: list) -> KVBlocks:
        """On the decode worker: the blocks behind a handle."""


class RayObjectStoreTransport:
    name = "ray-object-store"

    def publish(self, blocks: KVBlocks) -> list:
        import ray
        return [ray.put(blocks)]

    async def fetch(self, handle: list) -> KVBlocks:
        blocks = await handle[0]
        if not isinstance(blocks, KVBlocks):
            raise ValueError(f"kv handle: expected KVBlocks, got {type(blocks).__name__}")
        return blocks


TRANSPORTS = {RayObjectStoreTransport.name: RayObjectStoreTransport}


def make_transport(name: str) -> KVTransport:
    if name not in TRANSPORTS:
        raise ValueError(f"kv_transport: unknown transport {name!r}; choose one of {', '.join(TRANSPORTS)}")
    return TRANSPORTS[name]()
