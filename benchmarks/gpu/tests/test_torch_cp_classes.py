"""fulcrum.torch against PyTorch's own CP and FlexAttention classes.

These need a torch that has them (2.9 or later for the load-balancer
interface; see the matrix in docs/INTEGRATION.md) and, for the kernels, CUDA:
on Debian's torch 1.13 they skip, and `run_on_gpu.sh torch` runs them on the
GPU machine. The arithmetic itself is tested everywhere by
python/tests/test_block_mask.py."""

import importlib
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed")

from gpubench import kernels, masks, plans, rows  # noqa: E402

sys.path.insert(0, os.path.join(rows.REPO_ROOT, "python"))
from fulcrum import torch as ft  # noqa: E402
from fulcrum.block_mask import rank_block_mask  # noqa: E402

FOUND = ft.support()
needs_cp = pytest.mark.skipif(not FOUND.load_balancer_base, reason=FOUND.missing("this test"))
needs_cp_mask = pytest.mark.skipif(
    not (FOUND.create_cp_block_mask and torch.cuda.is_available()),
    reason="needs PyTorch's _create_cp_block_mask and CUDA")
needs_flex = pytest.mark.skipif(
    not (FOUND.from_kv_blocks and FOUND.flex_attention and torch.cuda.is_available()),
    reason="needs FlexAttention and CUDA")


@pytest.fixture(scope="module")
def balancer():
    path = plans.default_plugin(rows.REPO_ROOT)
    if not os.path.exists(path):
        pytest.skip(f"no plugin at {path}: build it or set FULCRUM_PLUGIN")
    import fulcrum
    with fulcrum.load(path, check_permissions=False) as b:
        yield b


def test_support_reports_this_torch():
    print("fulcrum.torch.support():", FOUND)
    assert FOUND.torch_version == str(torch.__version__)
    if FOUND.load_balancer_base:
        assert FOUND.balancer_module is not None


@needs_cp
def test_the_adapter_is_a_pytorch_load_balancer(balancer):
    lb = ft.FulcrumLoadBalancer(balancer, 4, doc_lengths=[[300, 212], [512]], block_size=32)
    assert isinstance(lb, ft._TorchLoadBalancer)
    assert ft._TorchLoadBalancer.__name__ == "_LoadBalancer"
    idx = lb._generate_indices()
    assert idx.ndim == 2 and idx.shape[0] == 2  # (B, L), what PyTorch's sharding asserts


class _OneRankMesh:
    """What _create_cp_block_mask reads of a DeviceMesh: its size, this rank
    and the device type. Lets one process build every rank's mask."""

    def __init__(self, rank, size, device_type):
        self._rank, self._size, self.device_type = rank, size, device_type

    def size(self):
        return self._size

    def get_local_rank(self):
        return self._rank


def _block_sets(num, idx):
    num, idx = num.reshape(-1).cpu().numpy(), idx.reshape(-1, idx.shape[-1]).cpu().numpy()
    return [set(idx[i, :num[i]].tolist()) for i in range(num.size)]


@needs_cp_mask
@pytest.mark.parametrize("strategy", ["balanced", "per_document", "ptrr", "head_tail"])
def test_pytorchs_cp_block_mask_with_the_adapter_is_fulcrums(balancer, strategy):
    """PyTorch's own FlexAttention CP mask, built with fulcrum's balancer,
    has exactly the partial and full blocks fulcrum computes for the
    gathered key order."""
    attention = importlib.import_module(FOUND.attention_module)
    cp, docs = 4, [700, 300, 1048]  # 2048 tokens: a multiple of cp x 128, as PyTorch asks
    lb = ft.FulcrumLoadBalancer(balancer, cp, doc_lengths=docs, strategy=strategy,
                                block_size=128, device="cuda")
    length = lb.padded_length
    doc = torch.full((length,), -1, dtype=torch.int64, device="cuda")
    doc[:sum(docs)] = torch.as_tensor(np.repeat(np.arange(len(docs)), docs), device="cuda")

    def mask_mod(b, h, q_idx, kv_idx):  # global indices; pads (doc -1) match nothing
        return (doc[q_idx] == doc[kv_idx]) & (kv_idx <= q_idx) & (doc[q_idx] >= 0)

    for rank in range(cp):
        theirs = attention._create_cp_block_mask(mask_mod, 1, 1, length, length,
                                                 _OneRankMesh(rank, cp, "cuda"), load_balancer=lb)
        ours = lb.rank_block_masks(rank, key_order="gathered")[0]
        assert _block_sets(theirs.full_kv_num_blocks, theirs.full_kv_indices) == \
            _block_sets(torch.as_tensor(ours.full_kv_num_blocks),
                        torch.as_tensor(ours.full_kv_indices)), (strategy, rank)
        assert _block_sets(theirs.kv_num_blocks, theirs.kv_indices) == \
            _block_sets(torch.as_tensor(ours.kv_num_blocks),
                        torch.as_tensor(ours.kv_indices)), (strategy, rank)


@needs_flex
@pytest.mark.parametrize("key_order", ["row", "gathered"])
@pytest.mark.parametrize("mask", ["causal", "sliding:300"])
def test_flex_attention_with_fulcrums_mask_is_the_unsharded_attention(balancer, key_order, mask):
    """Each rank's FlexAttention output and gradients, with the BlockMask from
    fulcrum.torch, against the unsharded float32 reference of the harness."""
    flex = kernels.compiled_flex()
    docs, cp = [900, 77, 1500, 331], 4
    plan = balancer.plan_cp("balanced", cp=cp, doc_lengths=docs, block_size=128, mask=mask)
    spec = masks.MaskSpec.parse(mask)
    for rank in range(cp):
        rm = rank_block_mask(plan, rank, key_order)
        block = ft.block_mask(rm, device="cuda")
        keys = torch.as_tensor(np.maximum(rm.kv_positions, 0), device="cuda")

        def kernel(q, k, v):
            if key_order == "gathered":  # the all-gather of the shards; pads masked out
                k, v = k[:, :, keys], v[:, :, keys]
            return flex(q, k, v, block_mask=block, enable_gqa=True)

        errors = kernels.reference_check(plan.positions[rank], docs, spec, heads=4, kv_heads=2,
                                         head_dim=64, kernel=kernel, device="cuda",
                                         dtype=torch.float32)
        assert max(errors.values()) < 2e-3, (key_order, mask, rank, errors)
