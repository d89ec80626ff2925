"""PyTorch adapters: index tensors in the shapes PyTorch's context-parallel
sharding expects, and a load balancer with its ``_generate_indices`` method.

PyTorch's CP rearranges a sequence with ``x[..., idx, ...]`` and then shards
it with ``Shard(seq_dim)``: rank r gets the r-th of P equal contiguous chunks.
A fulcrum plan is rank-major with equal shards, so its positions are exactly
such an index. A plan with padding (-1 entries) needs ``cp * shard_len``
slots: the pads become the positions N, N+1, ... of tokens the caller appends
to every sequence buffer (``pad_sequence``) and masks out of the loss. Keep
them out of every real document's mask (under a causal mask they are, since
they come after every real token).

Importing this module imports torch; ``import fulcrum`` does not.
"""

import numpy as np
import torch

from ._input_file import shown
from .balancer import CpPlan
from .dp import split_samples
from .errors import FulcrumError

__all__ = ["FulcrumError", "FulcrumLoadBalancer", "pad_sequence", "plan_index",
           "rearrange_indices", "restore_indices", "split_samples"]

try:  # present in recent PyTorch only; the interface is one method either way
    from torch.distributed.tensor.experimental._context_parallel._load_balancer import (
        _LoadBalancer as _TorchLoadBalancer)
except ImportError:  # pragma: no cover - depends on the installed torch
    _TorchLoadBalancer = object


def plan_index(plan, shard_len=None):
    """Rearrange index of one plan as int64 NumPy, rank-major, each rank's
    shard extended with pad slots to ``shard_len`` (default: the plan's own);
    pad slots index N, N+1, ... Length cp * shard_len, which is N when the plan
    has no padding. Pads added at the end of a rank's local order change no
    real token's tiles."""
    shard_len = plan.shard_len if shard_len is None else shard_len
    grid = np.full((plan.cp, shard_len), -1, dtype=np.int64)
    grid[:, :plan.shard_len] = plan.positions
    flat = grid.reshape(-1)
    pads = np.flatnonzero(flat < 0)
    flat[pads] = plan.tokens + np.arange(pads.size)
    return flat


def rearrange_indices(plans, device=None):
    """(len(plans), L) int64 tensor: row b rearranges row b's tokens so that
    chunk r of cp is rank r's shard. One plan gives (1, L), PyTorch's shape for
    a balancing that is the same across the batch. Rows of one batch share cp
    and N; their shards are extended to the longest, so L = cp * max shard_len
    (N when no plan pads)."""
    if not isinstance(plans, (list, tuple)):
        plans = [plans]
    if not plans:
        raise FulcrumError("invalid_argument", "no plans given; give at least one CpPlan")
    for p in plans:
        if not isinstance(p, CpPlan):
            raise FulcrumError("invalid_argument", f"plans holds {shown(p, 60)}, not a CpPlan; "
                               "give the plans Balancer.plan_cp returned")
    if len({(p.cp, p.tokens) for p in plans}) != 1:
        shapes = ", ".join(f"cp {p.cp} over {p.tokens} tokens" for p in plans)
        raise FulcrumError("invalid_argument",
                           f"the rows of one batch differ ({shapes}); plan every row of a batch "
                           "with the same cp and number of tokens")
    shard_len = max(p.shard_len for p in plans)
    return torch.as_tensor(np.stack([plan_index(p, shard_len) for p in plans]), device=device)


def restore_indices(plans, device=None):
    """argsort of the rearrange indices: x[..., idx][..., restore] == x."""
    return torch.argsort(rearrange_indices(plans, device), dim=-1)


def pad_sequence(tensor, length, seq_dim=1, value=0):
    """Extends ``tensor`` along ``seq_dim`` to ``length`` (an index's last
    dimension, e.g. ``FulcrumLoadBalancer.padded_length``) with ``value``;
    loss-mask the added tokens."""
    if not isinstance(tensor, torch.Tensor):
        raise FulcrumError("invalid_argument", f"tensor is {shown(tensor, 60)}; give a "
                           "torch.Tensor")
    for value_, what in ((length, "length"), (seq_dim, "seq_dim")):
        if isinstance(value_, (bool, np.bool_)) or not isinstance(value_, (int, np.integer)):
            raise FulcrumError("invalid_argument", f"{what} is {shown(value_, 60)}; give an "
                               "integer")
    if not -tensor.dim() <= seq_dim < tensor.dim():
        raise FulcrumError("invalid_argument", f"seq_dim is {seq_dim}, but the tensor has "
                           f"{tensor.dim()} dimensions; give the sequence dimension")
    if length > 1 << 40:
        raise FulcrumError("invalid_argument", f"length is {length}, more than any sequence "
                           "buffer; give the index's last dimension (padded_length)")
    extra = int(length) - tensor.shape[seq_dim]
    if extra < 0:
        raise FulcrumError("invalid_argument", f"tensor has {tensor.shape[seq_dim]} entries "
                           f"along dim {seq_dim}, more than the length {length} to pad to")
    if extra == 0:
        return tensor
    shape = list(tensor.shape)
    shape[seq_dim] = extra
    return torch.cat([tensor, tensor.new_full(shape, value)], dim=seq_dim)


class FulcrumLoadBalancer(_TorchLoadBalancer):
    """A CP load balancer for PyTorch's context parallel, planned by a fulcrum
    plugin: ``_generate_indices(restore=False)`` returns (1, L) or (B, L).

    ``doc_lengths`` is one row's document lengths (a list of ints), or one list
    per batch row; None means one causal document of ``seq_length`` tokens."""

    def __init__(self, balancer, world_size, seq_length=None, doc_lengths=None, *,
                 strategy="auto", block_size=128, mask="causal", fallback="contiguous",
                 device=None):
        if isinstance(doc_lengths, torch.Tensor):
            doc_lengths = doc_lengths.tolist()
        if doc_lengths is not None and not hasattr(doc_lengths, "__len__"):
            raise FulcrumError("invalid_argument", f"doc_lengths is {shown(doc_lengths, 60)}; "
                               "give a list of document lengths, or one list per batch row")
        if doc_lengths is not None and len(doc_lengths) and not np.isscalar(doc_lengths[0]) \
                and not (isinstance(doc_lengths, np.ndarray) and doc_lengths.ndim == 1):
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
