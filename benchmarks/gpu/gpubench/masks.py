"""One rank's attention mask under all-gather CP, as the kernels see it.

A rank's queries are its plan positions in plan order (-1 is a pad that
attends to nothing); its keys are the whole row in global order. A query at
global position q of a document starting at s attends to keys [lo, hi]:
document-causal [s, q], sliding:W [max(s, q - W + 1), q]. Both are one
interval per query, which is what lets the block counts below be exact
without materialising the (queries x keys) mask.

The block structure is what FlexAttention's BlockMask encodes: per local
query block of B rows and key block of B keys, empty (skipped), partial (the
mask is evaluated) or full (every pair allowed, the mask is not evaluated).
The number of non-empty blocks is the plan's tiles in fulcrum's work model.
"""

from dataclasses import dataclass

import numpy as np

PAD = -1


@dataclass(frozen=True)
class MaskSpec:
    kind: str  # causal | sliding
    window: int = 0

    @staticmethod
    def parse(text):
        if text == "causal":
            return MaskSpec("causal")
        head, _, value = text.partition(":")
        if head == "sliding" and value.isdigit() and int(value) > 0:
            return MaskSpec("sliding", int(value))
        raise ValueError(f"mask {text!r} is not supported here; use causal or sliding:W")

    def __str__(self):
        return "causal" if self.kind == "causal" else f"sliding:{self.window}"


def doc_ids(doc_lengths):
    """Document index of every global position."""
    lengths = np.asarray(doc_lengths, dtype=np.int64)
    return np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)


def doc_starts(doc_lengths):
    starts = np.zeros(len(doc_lengths) + 1, dtype=np.int64)
    np.cumsum(np.asarray(doc_lengths, dtype=np.int64), out=starts[1:])
    return starts


def key_interval(q, doc_lengths, mask):
    """Inclusive key range [lo, hi] of each real query position in q."""
    starts = doc_starts(doc_lengths)
    begin = starts[np.searchsorted(starts, q, side="right") - 1]
    if mask.kind == "causal":
        return begin, q.copy()
    return np.maximum(begin, q - mask.window + 1), q.copy()


def block_counts(positions, doc_lengths, mask, block):
    """Allowed (query, key) pairs of every (local query block, key block) of
    one rank: int64 array (ceil(len(positions) / B), ceil(N / B))."""
    positions = np.asarray(positions, dtype=np.int64)
    tokens = int(np.sum(doc_lengths))
    q_blocks = -(-positions.size // block)
    k_blocks = -(-tokens // block)
    # One spare column takes the -B that closes an interior run ending at the
    # last key block.
    counts = np.zeros((q_blocks, k_blocks + 1), dtype=np.int64)
    slot = np.flatnonzero(positions != PAD)
    if slot.size == 0:
        return counts[:, :k_blocks]
    lo, hi = key_interval(positions[slot], doc_lengths, mask)
    row = slot // block
    blo, bhi = lo // block, hi // block
    same = blo == bhi
    np.add.at(counts, (row[same], blo[same]), (hi - lo + 1)[same])
    split = ~same
    r, l, h, bl, bh = row[split], lo[split], hi[split], blo[split], bhi[split]
    np.add.at(counts, (r, bl), (bl + 1) * block - l)
    np.add.at(counts, (r, bh), h - bh * block + 1)
    # Every key block strictly between the two ends is covered whole: B pairs
    # from this query. Added as a difference along the key axis, summed once.
    interior = np.zeros_like(counts)
    inner = bh - bl >= 2
    np.add.at(interior, (r[inner], bl[inner] + 1), block)
    np.add.at(interior, (r[inner], bh[inner]), -block)
    counts += np.cumsum(interior, axis=1)
    return counts[:, :k_blocks]


def block_structure(counts, block):
    """(non-empty, full) boolean block maps from block_counts: a block is full
    when all B x B of its pairs are allowed (a block cut short by the end of
    the shard or the row never is)."""
    return counts > 0, counts == block * block


def dense_mask(positions, doc_lengths, mask):
    """The (local queries x N) boolean mask, pair by pair from document ids.
    Only for small rows: tests and the CPU reference."""
    positions = np.asarray(positions, dtype=np.int64)
    ids = doc_ids(doc_lengths)
    keys = np.arange(ids.size, dtype=np.int64)[None, :]
    q = positions[:, None]
    real = q != PAD
    qdoc = np.where(real, ids[np.maximum(q, 0)], -1)
    allowed = real & (ids[None, :] == qdoc) & (keys <= q)
    if mask.kind == "sliding":
        allowed &= q - keys < mask.window
    return allowed


def rank_summary(positions, doc_lengths, mask, block):
    """Per-rank figures the tile model and the fits use."""
    counts = block_counts(positions, doc_lengths, mask, block)
    nonempty, full = block_structure(counts, block)
    return {
        "tokens": int(np.count_nonzero(np.asarray(positions) != PAD)),
        "pairs": int(counts.sum()),
        "tiles": int(nonempty.sum()),
        "full_tiles": int(full.sum()),
        "partial_tiles": int(nonempty.sum() - full.sum()),
    }
