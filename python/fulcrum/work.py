"""The pairs and tiles work models of docs/WORK_MODELS.md, in NumPy.

Used when a plugin returns no per-rank figures (rank_pairs / rank_tiles are
NULL), and for the unsharded row that ``tiles_over_ideal`` divides by. All
work is vectorised over the row: per query for pairs, per run of consecutive
positions of one document (inside one local query block) for tiles.
"""

import functools
from dataclasses import dataclass

import numpy as np

PAD = -1


@dataclass(frozen=True)
class Mask:
    """A mask applied within each document: causal, full, sliding:W, prefix:L."""

    kind: str = "causal"
    param: int = 0

    @staticmethod
    def parse(text):
        from .errors import FulcrumError

        if isinstance(text, Mask):
            return text
        if text in ("causal", "full"):
            return Mask(text, 0)
        head, sep, value = str(text).partition(":")
        if sep and head in ("sliding", "prefix"):
            try:
                number = int(value, 10)
            except ValueError:
                number = None
            if number is not None and str(number) == value.lstrip("+"):
                return Mask(head, number)
        raise FulcrumError(
            "invalid_argument",
            f"mask {text!r} is unknown; use causal, full, sliding:W or prefix:L")

    def __str__(self):
        return self.kind if self.kind in ("causal", "full") else f"{self.kind}:{self.param}"


def doc_starts(tokens, doc_lengths):
    """Start of every document and the row's end: len(docs) + 1 entries."""
    lengths = np.asarray(doc_lengths if doc_lengths is not None and len(doc_lengths) else [tokens],
                         dtype=np.int64)
    starts = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    return starts


def key_ranges(q, starts, mask):
    """Inclusive global key range [lo, hi] each query of `q` attends to, and the
    end (exclusive) of its document."""
    doc = np.searchsorted(starts, q, side="right") - 1
    begin = starts[doc]
    end = starts[doc + 1]
    if mask.kind == "causal":
        lo, hi = begin, q
    elif mask.kind == "full":
        lo, hi = begin, end - 1
    elif mask.kind == "sliding":
        lo, hi = np.maximum(begin, q - mask.param + 1), q
    elif mask.kind == "prefix":
        # A bidirectional prefix of min(L, len) keys, causal after it.
        prefix = np.minimum(mask.param, end - begin)
        lo, hi = begin, begin + np.maximum(q - begin, prefix - 1)
    else:
        raise ValueError(f"mask kind {mask.kind!r} has no work model here")
    return lo, hi, begin


def _sum_plus_one(a, b):
    """sum over i = a..b of (i + 1), elementwise; 0 where b < a."""
    count = np.maximum(b - a + 1, 0)
    return np.where(count > 0, (a + b + 2) * count // 2, 0)


def run_pairs(mask, length, ia, ib):
    """Allowed pairs of the document-local queries ia..ib (inclusive) of
    documents of `length` tokens, in closed form: the sum of their key-range
    sizes, elementwise over runs."""
    if mask.kind == "causal":
        return _sum_plus_one(ia, ib)
    if mask.kind == "full":
        return (ib - ia + 1) * length
    if mask.kind == "sliding":
        # size(i) = min(i + 1, W): grows until i = W - 1, then stays W.
        w = mask.param
        flat_begin = np.maximum(ia, w - 1)
        return (_sum_plus_one(ia, np.minimum(ib, w - 2))
                + np.maximum(ib - flat_begin + 1, 0) * w)
    if mask.kind == "prefix":
        # size(i) = max(i + 1, min(L, len)): flat over the prefix, then causal.
        prefix = np.minimum(mask.param, length)
        flat_end = np.minimum(ib, prefix - 1)
        return (np.maximum(flat_end - ia + 1, 0) * prefix
                + _sum_plus_one(np.maximum(ia, prefix), ib))
    raise ValueError(f"mask kind {mask.kind!r} has no work model here")


def rank_work(positions, tokens, doc_lengths, block_size, mask):
    """Per-rank (tokens, pairs, tiles) of a plan: positions is (P, shard_len)
    with -1 for padding. Returns three int64 arrays of P entries.

    Work is counted per run: consecutive slots of one local query block that
    hold consecutive positions of one document. A run's pairs have a closed
    form and its key blocks are one interval, so after one pass over the plan
    to find the runs, the cost is per run, not per token."""
    mask = Mask.parse(mask)
    positions = np.asarray(positions, dtype=np.int64)
    cp, shard_len = positions.shape
    zeros = np.zeros(cp, dtype=np.int64)
    if shard_len == 0:
        return zeros, zeros.copy(), zeros.copy()
    b = int(block_size)
    starts = doc_starts(tokens, doc_lengths)
    flat = positions.reshape(-1)
    is_doc_start = np.zeros(int(tokens) + 1, dtype=bool)
    is_doc_start[starts] = True
    new_run = np.empty(flat.size, dtype=bool)
    new_run[0] = True
    np.not_equal(flat[1:], flat[:-1] + 1, out=new_run[1:])
    new_run[1:] |= is_doc_start[np.maximum(flat[1:], 0)]
    by_rank = new_run.reshape(cp, shard_len)
    by_rank[:, ::b] = True  # a local query block, or a rank, starts
    first = np.flatnonzero(new_run)
    length = np.diff(np.append(first, flat.size))
    q0 = flat[first]
    real = q0 >= 0  # a pad is a run of pads, counted nowhere
    first, length, q0 = first[real], length[real], q0[real]
    q1 = q0 + length - 1
    rank = first // shard_len
    doc = np.searchsorted(starts, q0, side="right") - 1
    begin = starts[doc]
    rank_tokens = np.bincount(rank, weights=length, minlength=cp).astype(np.int64)
    if first.size == 0:
        return rank_tokens, zeros, zeros.copy()
    pairs = run_pairs(mask, starts[doc + 1] - begin, q0 - begin, q1 - begin)
    rank_pairs = _sum_by_rank(pairs, rank, cp)
    lo, _, _ = key_ranges(q0, starts, mask)
    _, hi, _ = key_ranges(q1, starts, mask)
    group = first // b if shard_len % b == 0 else \
        rank * ((shard_len + b - 1) // b) + (first % shard_len) // b
    order, added = _union_added(group, lo // b, hi // b)
    # Groups are rank-major, so sorting by group keeps ranks in order.
    rank_tiles = _sum_by_rank(added, rank[order], cp)
    return rank_tokens, rank_pairs, rank_tiles


def tile_map(positions, tokens, doc_lengths, block_size, mask):
    """Boolean (P, local query blocks, key blocks): the tiles each rank's
    local query blocks touch. Its sum over the last two axes is rank_work's
    tiles."""
    mask = Mask.parse(mask)
    positions = np.asarray(positions, dtype=np.int64)
    cp, shard_len = positions.shape
    b = int(block_size)
    local_blocks = (shard_len + b - 1) // b
    key_blocks = (int(tokens) + b - 1) // b
    starts = doc_starts(tokens, doc_lengths)
    flat = positions.reshape(-1)
    slot = np.flatnonzero(flat != PAD)
    q = flat[slot]
    edges = np.zeros((cp * local_blocks, key_blocks + 1), dtype=np.int32)
    if q.size:
        lo, hi, _ = key_ranges(q, starts, mask)
        row = (slot // shard_len) * local_blocks + (slot % shard_len) // b
        # Each query's key blocks as +1 at lo, -1 past hi; a running sum along
        # the key axis is then positive exactly on the touched tiles.
        np.add.at(edges, (row, lo // b), 1)
        np.add.at(edges, (row, hi // b + 1), -1)
    covered = np.cumsum(edges, axis=1)[:, :key_blocks] > 0
    return covered.reshape(cp, local_blocks, key_blocks)


def _union_added(group, lo, hi):
    """Integer intervals [lo, hi] in groups: the order that sorts them by
    (group, lo), and in that order what each adds to its group's union, so that
    a group's sum is the number of integers its intervals cover. All groups at
    once: each is offset past the previous one's largest value, so one running
    maximum serves them all."""
    order = np.lexsort((lo, group))
    span = int(hi.max()) + 2
    offset = group[order] * span
    lo_s = lo[order] + offset
    hi_s = hi[order] + offset
    running = np.maximum.accumulate(hi_s)
    before = np.empty_like(running)
    before[0] = lo_s[0] - 1
    before[1:] = running[:-1]
    return order, np.maximum(0, hi_s - np.maximum(before, lo_s - 1))


def _sum_by_rank(values, rank, cp):
    """Exact int64 sums of `values` per rank, `rank` sorted ascending (bincount's
    float weights would round counts past 2^53)."""
    total = np.zeros(values.size + 1, dtype=np.int64)
    np.cumsum(values, out=total[1:])
    edges = np.searchsorted(rank, np.arange(cp + 1), side="left")
    return total[edges[1:]] - total[edges[:-1]]


def unsharded_tiles(tokens, doc_lengths, block_size, mask):
    """Tiles of the row held by one rank with its queries in global order: the
    runs are the pieces of each aligned query block cut at document starts, so
    this costs O(N/B + documents), not O(N). The last rows asked are cached:
    a training loop plans the same row with several strategies or ranks."""
    docs = None if doc_lengths is None else np.asarray(doc_lengths, dtype=np.int64)
    return _unsharded_tiles_cached(int(tokens), None if docs is None else docs.tobytes(),
                                   int(block_size), str(Mask.parse(mask)))


@functools.lru_cache(maxsize=64)
def _unsharded_tiles_cached(tokens, doc_bytes, block_size, mask_text):
    doc_lengths = None if doc_bytes is None else np.frombuffer(doc_bytes, dtype=np.int64)
    mask = Mask.parse(mask_text)
    b = int(block_size)
    starts = doc_starts(tokens, doc_lengths)
    cuts = np.union1d(np.arange(0, int(tokens), b, dtype=np.int64), starts[:-1])
    ends = np.append(cuts[1:], int(tokens)) - 1
    lo, _, _ = key_ranges(cuts, starts, mask)
    _, hi, _ = key_ranges(ends, starts, mask)
    _, added = _union_added(cuts // b, lo // b, hi // b)
    return int(added.sum())


def imbalance(values):
    """max / mean over ranks; 1.0 when everything is zero."""
    values = np.asarray(values, dtype=np.float64)
    total = values.sum()
    return float(values.max() * values.size / total) if total > 0 else 1.0
