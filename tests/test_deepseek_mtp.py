"""DeepSeek's MTP module against HF transformers' ``MtpModel`` (the drafter of
``generate(..., use_mtp=True)``): same random weights, written into the
checkpoint under DeepSeek's names (``model.layers.{num_layers}.*``), same
draft logits over a whole sequence."""

from __future__ import annotations

import pytest
import torch
from _tiny_hf import save_checkpoint
from test_deepseek import build_hf, prompts, tiny_config

from tokenmill.engine.block_pool import BlockPool
from tokenmill.engine.kv_cache_manager import KVCacheManager
from tokenmill.engine.request import Request
from tokenmill.engine.runner import ModelRunner
from tokenmill.engine.scheduler import Scheduler
from tokenmill.model.loaders import load_model
from tokenmill.sampling_params import SamplingParams

transformers = pytest.importorskip("transformers")
from safetensors.torch import save_file  # noqa: E402
from transformers.modeling_layers import MtpModel  # noqa: E402

CPU = torch.device("cpu")


def deepseek_names(mtp_state: dict, num_layers: int) -> dict:
    """HF MtpModel's parameter names -> DeepSeek's checkpoint names (the reverse
    of transformers' conversion mapping for MtpModel)."""
    out = {}
    for name, t in mtp_state.items():
        if not name.startswith("layers."):
            continue  # embed_tokens, shared_head: the main model's own
        depth, rest = name.removeprefix("layers.").split(".", 1)
        rest = rest.removeprefix("mtp_block.").replace("post_norm.", "shared_head.norm.")
        out[f"model.layers.{num_layers + int(depth)}.{rest}"] = t.contiguous()
    return out


@pytest.fixture(scope="module")
def with_mtp(tmp_path_factory):
    cfg = tiny_config()
    hf = build_hf(cfg)
    torch.manual_seed(5)
    mtp = MtpModel(hf, 1).eval()
    with torch.no_grad():
        moe = mtp.layers[0].mtp_block.mlp
        moe.gate.e_score_correction_bias.normal_(0, 0.05)
        # MtpModel leaves its routed experts and router as torch.empty memory (zeros
        # in a fresh process, garbage that overflows to NaN after other tests): set them.
        for weight in (moe.gate.weight, moe.experts.gate_up_proj, moe.experts.down_proj):
            weight.normal_(0, 0.02)
    root = save_checkpoint(hf, tmp_path_factory.mktemp("deepseek-mtp"))
    save_file(deepseek_names(mtp.state_dict(), cfg.num_hidden_layers), str(root / "mtp.safetensors"))
    return hf, mtp, root


def hf_draft_logits(hf, mtp, ids):
    """HF's draft logits for rows 0..n-2: token ids[p + 1] with the main model's hidden at p."""
    with torch.no_grad():
        hidden = hf(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1]  # [1, n, h], after the norm
        positions = torch.arange(1, len(ids))[None]
        h = mtp.forward_layer(0, hidden[:, :-1], positions, None, input_ids=torch.tensor([ids[1:]]))
        return mtp._project_to_logits(h)[0]


def our_draft_logits(model, ids):
    """One prefill of ``ids`` through the paged path, then MTP depth 0 over the
    same rows and slots (row p: token ids[p + 1], or the main model's greedy
    token for the last row) into a cache layer of its own."""
    n, block_size = len(ids), 4
    num_blocks = -(-n // block_size) + 1
    kv = KVCacheManager(BlockPool(num_blocks, block_size))
    sched = Scheduler(kv, 4, n)
    runner = ModelRunner(model, num_blocks, block_size, CPU, torch.float32)
    sched.add(Request("r", ids, SamplingParams(max_tokens=1)))
    inputs = runner.prepare(sched.schedule(), kv)
    mtp_cache = torch.zeros_like(runner.kv_caches[0])
    with torch.inference_mode():
        hidden = model(inputs.input_ids, inputs.positions, inputs.meta, runner.kv_caches)  # [n, h]
        nxt = model.compute_logits(hidden[-1:]).argmax(dim=-1)
        tokens = torch.cat([inputs.input_ids[1:], nxt])
        h = model.mtp_hidden(0, tokens, hidden, inputs.positions, inputs.meta, mtp_cache)
        return model.compute_logits(h)[:-1]


def test_mtp_draft_logits_match_hf(with_mtp):
    """Rows sit at the main model's positions (p, not HF's p + 1) so that they
    share its block tables; rope is relative, so the scores are the same."""
    hf, mtp, root = with_mtp
    model = load_model(str(root), "hf", CPU, torch.float32).model
    assert model.mtp is not None
    for ids in prompts():
        ref = hf_draft_logits(hf, mtp, ids)
        ours = our_draft_logits(model, ids)
        torch.testing.assert_close(ours, ref, atol=5e-5, rtol=1e-4)
        assert torch.equal(ours.argmax(dim=-1), ref.argmax(dim=-1))


def test_checkpoint_without_mtp_weights_loads_without_mtp(tmp_path):
    model = load_model(str(save_checkpoint(build_hf(tiny_config()), tmp_path)), "hf", CPU, torch.float32).model
    assert model.arch.num_mtp_layers == 1 and model.mtp is None
    with pytest.raises(ValueError, match="MTP"):
        model.mtp_hidden(0, None, None, None, None, None)
