"""fulcrum in a PyTorch training loop: context parallelism's load balancer,
its index tensors, and each rank's FlexAttention BlockMask.

PyTorch's CP rearranges a sequence with ``x[..., idx, ...]`` and then shards
it with ``Shard(seq_dim)``: rank r gets the r-th of P equal contiguous chunks.
A fulcrum plan is rank-major with equal shards, so its positions are exactly
such an index. A plan with padding (-1 entries) needs ``cp * shard_len``
slots: the pads become the positions N, N+1, ... of tokens the caller appends
to every sequence buffer (``pad_sequence``) and masks out of the loss and out
of every document.

PyTorch's CP classes are private and move between releases; ``support()``
says what the installed torch has (docs/INTEGRATION.md has the matrix by
version). Everything here imports on a torch without them (Debian's 1.13):
the index tensors, the shards and the block-mask arithmetic work there, and
what needs a missing class raises FulcrumError("unsupported") naming it.

Importing this module imports torch; ``import fulcrum`` does not.
"""

import functools
import importlib
import inspect
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from ._input_file import shown
from .balancer import CpPlan
from .block_mask import RankBlockMask, rank_block_mask
from .dp import split_samples
from .errors import FulcrumError

__all__ = ["FulcrumError", "FulcrumLoadBalancer", "RankBlockMask", "TorchSupport",
           "block_mask", "pad_sequence", "plan_index", "position_mask_mod", "rank_block_mask",
           "rearrange_indices", "restore_indices", "shard", "split_samples", "support"]

# Where PyTorch keeps its CP code: the _context_parallel package first (the
# newer layout), then the single modules it replaced.
_BALANCER_MODULES = ("torch.distributed.tensor.experimental._context_parallel._load_balancer",
                     "torch.distributed.tensor.experimental._load_balancer")
_ATTENTION_MODULES = ("torch.distributed.tensor.experimental._context_parallel._attention",
                      "torch.distributed.tensor.experimental._attention")


def _import_first(names):
    for name in names:
        try:
            return importlib.import_module(name)
        except Exception:  # noqa: BLE001 - absent, or present but broken on this build
            continue
    return None


@dataclass(frozen=True)
class TorchSupport:
    """What the installed torch offers fulcrum (each False when absent)."""

    torch_version: str
    balancer_module: Optional[str]    # where _LoadBalancer lives
    attention_module: Optional[str]   # where _context_parallel_shard lives
    load_balancer_base: bool          # _LoadBalancer with _generate_indices
    head_tail: bool                   # _HeadTailLoadBalancer
    per_document: bool                # _PerDocumentHeadTailLoadBalancer
    ptrr: bool                        # _PTRRLoadBalancer
    context_parallel_shard: bool      # _context_parallel_shard(..., load_balancer=)
    unshard_takes_load_balancer: bool  # context_parallel_unshard(..., load_balancer=)
    context_parallel_takes_load_balancer: bool  # the public context manager
    create_cp_block_mask: bool        # _create_cp_block_mask(..., load_balancer=)
    flex_attention: bool              # torch.nn.attention.flex_attention
    from_kv_blocks: bool              # BlockMask.from_kv_blocks
    from_kv_blocks_seq_lengths: bool  # ... with seq_lengths (shards not a multiple of B)

    def missing(self, what):
        """One line saying that ``what`` needs something this torch lacks."""
        return (f"{what} needs PyTorch's {'FlexAttention' if 'BlockMask' in what else 'CP'} "
                f"classes, which torch {self.torch_version} does not have; see the version "
                "matrix in docs/INTEGRATION.md (the index tensors and fulcrum.block_mask work "
                "without them)")


def _takes(function, name):
    try:
        return name in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


@functools.lru_cache(maxsize=None)
def support():
    """Probe the installed torch once: a TorchSupport."""
    balancers = _import_first(_BALANCER_MODULES)
    attention = _import_first(_ATTENTION_MODULES)
    shard_fn = getattr(attention, "_context_parallel_shard", None)
    unshard_fn = getattr(attention, "context_parallel_unshard", None)
    cp_fn = getattr(attention, "context_parallel", None)
    try:
        from torch.nn.attention import flex_attention as flex
    except Exception:  # noqa: BLE001 - torch before FlexAttention
        flex = None
    block_mask_cls = getattr(flex, "BlockMask", None)
    from_kv = getattr(block_mask_cls, "from_kv_blocks", None)
    return TorchSupport(
        torch_version=str(torch.__version__),
        balancer_module=balancers.__name__ if balancers else None,
        attention_module=attention.__name__ if attention else None,
        load_balancer_base=balancers is not None and hasattr(balancers, "_LoadBalancer"),
        head_tail=balancers is not None and hasattr(balancers, "_HeadTailLoadBalancer"),
        per_document=balancers is not None and hasattr(balancers,
                                                       "_PerDocumentHeadTailLoadBalancer"),
        ptrr=balancers is not None and hasattr(balancers, "_PTRRLoadBalancer"),
        context_parallel_shard=shard_fn is not None and _takes(shard_fn, "load_balancer"),
        unshard_takes_load_balancer=unshard_fn is not None and _takes(unshard_fn, "load_balancer"),
        context_parallel_takes_load_balancer=cp_fn is not None and _takes(cp_fn, "load_balancer"),
        create_cp_block_mask=attention is not None and hasattr(attention, "_create_cp_block_mask"),
        flex_attention=flex is not None and hasattr(flex, "flex_attention"),
        from_kv_blocks=from_kv is not None,
        from_kv_blocks_seq_lengths=from_kv is not None and _takes(from_kv, "seq_lengths"),
    )


def _torch_load_balancer_base():
    module = _import_first(_BALANCER_MODULES)
    return getattr(module, "_LoadBalancer", object)


# PyTorch's interface where the installed torch has it; a plain object
# otherwise (the adapter still answers _generate_indices).
_TorchLoadBalancer = _torch_load_balancer_base()


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


def _as_plans(plans):
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
    return list(plans)


def rearrange_indices(plans, device=None):
    """(len(plans), L) int64 tensor: row b rearranges row b's tokens so that
    chunk r of cp is rank r's shard. One plan gives (1, L), PyTorch's shape for
    a balancing that is the same across the batch. Rows of one batch share cp
    and N; their shards are extended to the longest, so L = cp * max shard_len
    (N when no plan pads)."""
    plans = _as_plans(plans)
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


def shard(tensor, indices, rank, cp, seq_dim=1):
    """Rank ``rank``'s shard of a (batch, ..., L, ...) tensor: what PyTorch's
    CP sharding keeps on that rank (rearrange by ``indices``, a (1, L) or
    (batch, L) tensor from rearrange_indices, then the rank-th of ``cp`` equal
    chunks along ``seq_dim``). For hosts that shard themselves, or a torch
    without the CP classes. Dimension 0 is the batch."""
    if seq_dim < 1 or seq_dim >= tensor.dim():
        raise FulcrumError("invalid_argument", f"seq_dim {seq_dim} is not a sequence dimension "
                           f"of a {tensor.dim()}-d tensor whose dim 0 is the batch")
    length = indices.shape[-1]
    if tensor.shape[seq_dim] != length or length % cp:
        raise FulcrumError("invalid_argument", f"the tensor has {tensor.shape[seq_dim]} entries "
                           f"along dim {seq_dim} and the index {length} (cp {cp}); pad_sequence "
                           "the tensor to the index's length")
    if indices.shape[0] not in (1, tensor.shape[0]):
        raise FulcrumError("invalid_argument", f"{indices.shape[0]} index rows for a batch of "
                           f"{tensor.shape[0]}; give one row, or one per batch row")
    shard_len = length // cp
    mine = indices[:, rank * shard_len:(rank + 1) * shard_len].to(tensor.device)
    shape = [1] * tensor.dim()
    shape[0], shape[seq_dim] = mine.shape[0], shard_len
    mine = mine.reshape(shape).expand(*[tensor.shape[d] if d != seq_dim else shard_len
                                        for d in range(tensor.dim())])
    return torch.gather(tensor, seq_dim, mine)


def position_mask_mod(rank_masks, device=None):
    """FlexAttention's mask_mod(b, h, q_idx, kv_idx) for rank masks of one
    batch: reads the tables of row positions and documents, so it holds for
    any plan and either key order. Plain tensor indexing: it runs on any torch
    (the tests evaluate it on a grid against the dense mask)."""
    if isinstance(rank_masks, RankBlockMask):
        rank_masks = [rank_masks]
    first = rank_masks[0]
    block = first.block_size

    # The kernel may read the mask on the padded tail of a last short block:
    # the tables run to whole blocks, the tail a pad that matches nothing.
    def table(name, fill):
        length = -(-getattr(first, name).size // block) * block
        rows = np.full((len(rank_masks), length), fill, dtype=np.int64)
        for b, m in enumerate(rank_masks):
            values = getattr(m, name)
            rows[b, :values.size] = values
        return torch.as_tensor(rows, device=device)

    q_pos, q_doc = table("q_positions", -1), table("q_docs", -1)
    k_pos, k_doc, k_off = (table("kv_positions", -1), table("kv_docs", -2),
                           table("kv_doc_offsets", -1))
    kind, param = first.mask.kind, first.mask.param

    def mask_mod(b, h, q_idx, kv_idx):
        q, k = q_pos[b, q_idx], k_pos[b, kv_idx]
        allowed = q_doc[b, q_idx] == k_doc[b, kv_idx]
        if kind == "causal":
            return allowed & (k <= q)
        if kind == "sliding":
            return allowed & (k <= q) & (q - k < param)
        if kind == "prefix":
            return allowed & ((k <= q) | (k_off[b, kv_idx] < param))
        return allowed  # full

    return mask_mod


def block_mask(rank_masks, device=None, heads=1):
    """A FlexAttention ``BlockMask`` from one RankBlockMask per batch row (the
    same rank, block size and shapes): ``BlockMask.from_kv_blocks`` with a
    mask_mod that reads the row positions and documents, so no (queries x
    keys) mask is ever built. Raises FulcrumError("unsupported") on a torch
    without FlexAttention."""
    found = support()
    if not found.from_kv_blocks:
        raise FulcrumError("unsupported", found.missing("a BlockMask"))
    from torch.nn.attention.flex_attention import BlockMask

    if isinstance(rank_masks, RankBlockMask):
        rank_masks = [rank_masks]
    first = rank_masks[0]
    if any((m.block_size, m.q_len, m.kv_len, m.mask, m.key_order) !=
           (first.block_size, first.q_len, first.kv_len, first.mask, first.key_order)
           for m in rank_masks):
        raise FulcrumError("invalid_argument", "the rows' block masks differ in block size, "
                           "shapes, mask or key order; build them from one batch's plans")
    block = first.block_size

    def stacked(name, dtype=torch.int32):
        array = np.stack([getattr(m, name) for m in rank_masks])
        tensor = torch.as_tensor(array, dtype=dtype, device=device)
        return tensor.unsqueeze(1).repeat(1, heads, *([1] * (tensor.dim() - 1)))

    mask_mod = position_mask_mod(rank_masks, device)
    kwargs = {}
    if found.from_kv_blocks_seq_lengths:
        kwargs["seq_lengths"] = (first.q_len, first.kv_len)
    elif first.q_len % block or first.kv_len % block:
        raise FulcrumError("unsupported", f"torch {found.torch_version}'s BlockMask.from_kv_blocks "
                           "takes no seq_lengths, so shards and keys must be multiples of the "
                           f"block size {block}; plan with a block size that divides them")
    return BlockMask.from_kv_blocks(stacked("kv_num_blocks"), stacked("kv_indices"),
                                    stacked("full_kv_num_blocks"), stacked("full_kv_indices"),
                                    BLOCK_SIZE=block, mask_mod=mask_mod, **kwargs)


def _is_head_tail(index, cp):
    """Whether a rearrange index is PyTorch's head-tail order of one causal
    row, the only order its SDPA ring attention computes correctly."""
    n = index.size
    if n % (2 * cp):
        return False
    chunks = np.arange(n).reshape(2 * cp, -1)
    head = np.arange(cp)
    want = np.stack([chunks[head], chunks[2 * cp - 1 - head]], axis=1).reshape(-1)
    return bool(np.array_equal(index, want))


class FulcrumLoadBalancer(_TorchLoadBalancer):
    """A CP load balancer for PyTorch's context parallel, planned by a fulcrum
    plugin: ``_generate_indices(restore=False)`` returns (1, L) or (B, L).

    ``doc_lengths`` is one row's document lengths (a list of ints), or one list
    per batch row; None means one causal document of ``seq_length`` tokens.
    ``block_mask(rank)`` gives that rank's FlexAttention BlockMask for the
    same plans."""

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

    def rank_block_masks(self, rank, key_order="gathered"):
        """One RankBlockMask per batch row for ``rank``, shards extended to the
        batch's common length."""
        shard_len = self.padded_length // self.world_size
        return [rank_block_mask(p, rank, key_order, shard_len) for p in self.plans]

    def block_mask(self, rank, key_order="gathered", device=None, heads=1):
        """``rank``'s BlockMask over every batch row: its queries against the
        all-gathered keys ("gathered", what PyTorch's FlexAttention CP path
        passes the kernel) or keys restored to row order ("row")."""
        return block_mask(self.rank_block_masks(rank, key_order),
                          device=self.device if device is None else device, heads=heads)

    def check_sdpa(self):
        """PyTorch's SDPA ring attention, once given any load balancer, assumes
        the head-tail order of one causal row and computes other orders
        wrongly without an error. Raises FulcrumError("unsupported") unless
        every row's plan is exactly that order."""
        for b, plan in enumerate(self.plans):
            docs = plan.doc_lengths
            one_doc = docs is None or len(docs) <= 1
            if not (one_doc and plan.mask == "causal" and plan.padding == 0 and
                    _is_head_tail(plan.positions.reshape(-1), plan.cp)):
                raise FulcrumError(
                    "unsupported", f"row {b}'s plan ({plan.used}, mask {plan.mask}, "
                    f"{0 if docs is None else len(docs)} documents) is not the head-tail order "
                    "of one causal row, which is all PyTorch's SDPA ring attention computes "
                    "correctly; use FlexAttention with block_mask(rank), or strategy "
                    "head_tail on single-document causal rows")
