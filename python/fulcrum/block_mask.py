"""One CP rank's FlexAttention block mask, from a fulcrum plan, in NumPy.

Under all-gather CP a rank holds its shard of queries (the plan's positions
for that rank, in plan order) and attends to the keys of the whole row. Where
those keys sit depends on the host:

- ``key_order="gathered"``: the keys are the all-gather of every rank's
  shard, i.e. ``plan.positions.reshape(-1)``, pads included. This is what
  PyTorch's FlexAttention CP path hands the kernel (it all-gathers the
  rearranged K/V and never restores them), so a mask for that path must
  use this order.
- ``key_order="row"``: the gathered keys were put back in row order (one
  ``index_select`` with the plan's restore index, as fulcrum's runtime does).
  Only in this order are the non-empty blocks exactly the plan's ``tiles``:
  fulcrum's planners balance against row-ordered keys, and a gathered order
  can cut one document's keys across more key blocks.

A block is one (local query block of B rows, key block of B key slots). It is
empty (never visited), partial (the kernel evaluates the mask inside it) or
full (every pair allowed, the mask is skipped). A block cut short by the end
of the shard or of the keys is never full. Pairs are counted exactly, per
query interval against runs of consecutive key positions, without building
the (queries x keys) mask.

Importing this module needs NumPy only; fulcrum.torch turns the result into
tensors and a ``BlockMask``.
"""

from dataclasses import dataclass

import numpy as np

from .errors import FulcrumError
from .work import Mask, doc_starts, key_ranges

PAD = -1
KEY_ORDERS = ("gathered", "row")


@dataclass(frozen=True, eq=False)
class RankBlockMask:
    """The BlockMask inputs of one rank (NumPy; int32 where FlexAttention wants it).

    ``kv_num_blocks[i]`` partial key blocks of query block i are listed first in
    ``kv_indices[i]`` (ascending); ``full_kv_num_blocks`` / ``full_kv_indices``
    likewise for full blocks. ``block_pairs`` is the exact number of allowed
    pairs of every block. ``q_positions`` / ``kv_positions`` are the row
    positions of the query and key slots (-1: pad); ``q_docs`` / ``kv_docs``
    their documents (-1 for a pad query, -2 for a pad key, so that a pad never
    matches anything)."""

    rank: int
    block_size: int
    key_order: str
    mask: Mask
    q_positions: np.ndarray
    kv_positions: np.ndarray
    q_docs: np.ndarray
    kv_docs: np.ndarray
    kv_doc_offsets: np.ndarray  # position of each key within its document; -1 for pads
    block_pairs: np.ndarray  # (query blocks, key blocks) int64
    kv_num_blocks: np.ndarray
    kv_indices: np.ndarray
    full_kv_num_blocks: np.ndarray
    full_kv_indices: np.ndarray

    @property
    def q_len(self):
        return int(self.q_positions.size)

    @property
    def kv_len(self):
        return int(self.kv_positions.size)

    @property
    def tiles(self):
        """Non-empty blocks: the kernel's work under the tile model."""
        return int(np.count_nonzero(self.block_pairs))

    @property
    def full_tiles(self):
        return int(self.full_kv_num_blocks.sum())

    @property
    def pairs(self):
        return int(self.block_pairs.sum())


def _block_lists(blocks):
    """(counts, indices): each row's set blocks first, ascending; the tail of a
    row past its count is never read by the kernel."""
    order = np.argsort(~blocks, axis=1, kind="stable").astype(np.int32)
    return blocks.sum(axis=1).astype(np.int32), order


def _key_runs(kv_positions, block):
    """Maximal runs of key slots that hold consecutive row positions inside
    one key block: (key block, first position, last position) arrays."""
    slots = np.flatnonzero(kv_positions != PAD)
    if slots.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    pos = kv_positions[slots]
    kb = slots // block
    starts = np.ones(slots.size, dtype=bool)
    starts[1:] = (slots[1:] != slots[:-1] + 1) | (pos[1:] != pos[:-1] + 1) | (kb[1:] != kb[:-1])
    first = np.flatnonzero(starts)
    last = np.append(first[1:], slots.size) - 1
    return kb[first], pos[first], pos[last]


def _count_pairs(q_positions, kv_positions, tokens, doc_lengths, mask, block):
    """Exact allowed pairs per (query block, key block)."""
    q_blocks = -(-q_positions.size // block)
    k_blocks = -(-kv_positions.size // block)
    counts = np.zeros((q_blocks, k_blocks), dtype=np.int64)
    run_kb, run_lo, run_hi = _key_runs(kv_positions, block)
    if run_kb.size == 0:
        return counts
    starts = doc_starts(tokens, doc_lengths)
    for qb in range(q_blocks):
        q = q_positions[qb * block:(qb + 1) * block]
        q = q[q != PAD]
        if q.size == 0:
            continue
        lo, hi, _ = key_ranges(q, starts, mask)
        # Only runs that reach into the block's key span can overlap.
        near = np.flatnonzero((run_hi >= lo.min()) & (run_lo <= hi.max()))
        if near.size == 0:
            continue
        overlap = (np.minimum(hi[:, None], run_hi[None, near]) -
                   np.maximum(lo[:, None], run_lo[None, near]) + 1)
        per_run = np.maximum(overlap, 0).sum(axis=0)
        np.add.at(counts[qb], run_kb[near], per_run)
    return counts


def rank_block_mask(plan, rank, key_order="gathered", shard_len=None):
    """The block mask of ``rank``'s queries in ``plan`` (a CpPlan) against the
    row's keys in ``key_order`` ("gathered" or "row", see the module). Blocks
    are the plan's ``block_size``. ``shard_len`` (at least the plan's) extends
    every shard with pads, as ``fulcrum.torch.rearrange_indices`` does for the
    rows of one batch."""
    if key_order not in KEY_ORDERS:
        raise FulcrumError("invalid_argument", f"key_order {key_order!r} is unknown; use "
                           "'gathered' (PyTorch's all-gathered K/V) or 'row' (K/V restored)")
    if not 0 <= rank < plan.cp:
        raise FulcrumError("invalid_argument", f"rank {rank} is outside the plan's {plan.cp} CP "
                           f"ranks; give 0..{plan.cp - 1}")
    shard_len = plan.shard_len if shard_len is None else int(shard_len)
    if shard_len < plan.shard_len:
        raise FulcrumError("invalid_argument", f"shard_len {shard_len} is shorter than the "
                           f"plan's shards of {plan.shard_len}; give at least that")
    mask = Mask.parse(plan.mask)
    block = int(plan.block_size)
    grid = np.full((plan.cp, shard_len), PAD, dtype=np.int64)
    grid[:, :plan.shard_len] = plan.positions
    q_positions = grid[rank].copy()
    kv_positions = grid.reshape(-1).copy() if key_order == "gathered" else np.arange(
        plan.tokens, dtype=np.int64)

    counts = _count_pairs(q_positions, kv_positions, plan.tokens, plan.doc_lengths, mask, block)
    # B x B allowed pairs: a block cut short, or holding a pad, falls below.
    full = counts == block * block
    partial = (counts > 0) & ~full
    kv_num, kv_idx = _block_lists(partial)
    full_num, full_idx = _block_lists(full)

    starts = doc_starts(plan.tokens, plan.doc_lengths)

    def docs(positions, pad_doc):
        real = positions != PAD
        doc = np.full(positions.size, pad_doc, dtype=np.int64)
        doc[real] = np.searchsorted(starts, positions[real], side="right") - 1
        return doc

    kv_docs = docs(kv_positions, -2)
    offsets = np.full(kv_positions.size, PAD, dtype=np.int64)
    real = kv_positions != PAD
    offsets[real] = kv_positions[real] - starts[kv_docs[real]]
    return RankBlockMask(rank=rank, block_size=block, key_order=key_order, mask=mask,
                         q_positions=q_positions, kv_positions=kv_positions,
                         q_docs=docs(q_positions, -1), kv_docs=kv_docs, kv_doc_offsets=offsets,
                         block_pairs=counts, kv_num_blocks=kv_num, kv_indices=kv_idx,
                         full_kv_num_blocks=full_num, full_kv_indices=full_idx)
