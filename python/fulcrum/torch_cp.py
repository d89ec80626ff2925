"""PyTorch adapters: index tensors in the shapes PyTorch's context-parallel
sharding expects, and a load balancer with its ``_generate_indices`` method.

PyTorch's CP rearranges a sequence with ``x[..., idx, ...]`` and then shards
it with ``Shard(seq_dim)``: rank r gets the r-th of P equal contiguous chunks.
A fulcrum plan is rank-major with equal shards, so its positions are exactly
such an index. A plan with padding (-1 entries) needs ``cp * shard_len``
slots: the pads become the positions N, N+1, ... of tokens the caller appends
to every sequence buffer (``pad_sequence``) and masks out of the loss. Under
causal and document masks no real token attends to them, since they come
after every real token.

Importing this module imports torch; ``import fulcrum`` does not.
"""

import numpy as np
import torch

from .dp import split_samples  # noqa: F401  (re-exported: the DP helper)
from .errors import FulcrumError

try:  # present in recent PyTorch only; the interface is one method either way
    from torch.distributed.tensor.experimental._context_parallel._load_balancer import (
        _LoadBalancer as _TorchLoadBalancer)
except ImportError:  # pragma: no cover - depends on the installed torch
    _TorchLoadBalancer = object


def plan_index(plan):
    """Rearrange index of one plan as int64 NumPy, length cp * shard_len (N
    when the plan has no padding); pad slots index N, N+1, ..."""
    flat = plan.positions.reshape(-1).copy()
    pads = np.flatnonzero(flat < 0)
    flat[pads] = plan.tokens + np.arange(pads.size)
    return flat


def rearrange_indices(plans, device=None):
    """(len(plans), L) int64 tensor: row b rearranges row b's tokens so that
    chunk r of P is rank r's shard. One plan gives (1, L), PyTorch's shape for
    a balancing that is the same across the batch."""
    if not isinstance(plans, (list, tuple)):
        plans = [plans]
    if not plans:
        raise FulcrumError("invalid_argument", "no plans given; give at least one CpPlan")
    rows = [plan_index(p) for p in plans]
    if len({r.size for r in rows}) != 1 or len({p.cp for p in plans}) != 1:
        sizes = ", ".join(f"{p.cp}x{p.shard_len}" for p in plans)
        raise FulcrumError("invalid_argument",
                           f"plans of one batch shard to different shapes ({sizes}); plan every "
                           "row of a batch with the same cp and tokens, and pad rows to one length")
    return torch.as_tensor(np.stack(rows), device=device)


def restore_indices(plans, device=None):
    """argsort of the rearrange indices: x[..., idx][..., restore] == x."""
    return torch.argsort(rearrange_indices(plans, device), dim=-1)


def pad_sequence(tensor, plan, seq_dim=1, value=0):
    """Appends ``plan.padding`` entries of ``value`` along ``seq_dim``, so that the
    rearrange index of a padded plan applies; loss-mask them."""
    if plan.padding == 0:
        return tensor
    shape = list(tensor.shape)
    shape[seq_dim] = plan.padding
    return torch.cat([tensor, tensor.new_full(shape, value)], dim=seq_dim)


class FulcrumLoadBalancer(_TorchLoadBalancer):
    """A CP load balancer for PyTorch's context parallel, planned by a fulcrum
    plugin: ``_generate_indices(restore=False)`` returns (1, L) or (B, L).

    ``doc_lengths`` is one row's document lengths (a list of ints), or one list
    per batch row; None means one causal document of ``seq_length`` tokens."""

    def __init__(self, balancer, world_size, seq_length=None, doc_lengths=None, *,
                 strategy="auto", block_size=128, mask="causal", fallback="contiguous",
                 device=None):
        if doc_lengths is not None and len(doc_lengths) and not np.isscalar(doc_lengths[0]):
            rows = [list(r) for r in doc_lengths]
        else:
            rows = [doc_lengths]
        self.plans = [balancer.plan_cp(strategy, cp=world_size, tokens=seq_length,
                                       doc_lengths=row, block_size=block_size, mask=mask,
                                       fallback=fallback) for row in rows]
        self.world_size = world_size
        self.device = device
        self._indices = rearrange_indices(self.plans, device)

    @property
    def padded_length(self):
        """Length of a sequence buffer after pad_sequence: cp * shard_len."""
        return self._indices.shape[-1]

    def _generate_indices(self, restore=False):
        if restore:
            return torch.argsort(self._indices, dim=-1)
        return self._indices.clone()
