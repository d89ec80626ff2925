"""fulcrum.block_mask against a pair-by-pair recount of the dense mask.

The recount shares nothing with the package: document ids by np.repeat, the
mask from its definition (docs/WORK_MODELS.md) for every (query slot, key
slot), blocks summed with reshape. NumPy only."""

import numpy as np
import pytest

from fulcrum import block_mask as bm
from fulcrum.errors import FulcrumError


def dense_allowed(q_positions, kv_positions, tokens, doc_lengths, mask):
    """(queries x keys) boolean, from the definitions."""
    docs = np.repeat(np.arange(len(doc_lengths)), doc_lengths) if doc_lengths is not None \
        else np.zeros(tokens, dtype=np.int64)
    first = {}
    for i, d in enumerate(docs.tolist()):
        first.setdefault(d, i)
    start = np.array([first[d] for d in docs.tolist()], dtype=np.int64)
    allowed = np.zeros((q_positions.size, kv_positions.size), dtype=bool)
    kind, _, param = mask.partition(":")
    for i, q in enumerate(q_positions.tolist()):
        if q < 0:
            continue
        for j, k in enumerate(kv_positions.tolist()):
            if k < 0 or docs[k] != docs[q]:
                continue
            if kind == "causal":
                ok = k <= q
            elif kind == "full":
                ok = True
            elif kind == "sliding":
                ok = k <= q and q - k < int(param)
            else:  # prefix:L
                ok = k <= q or k - start[k] < int(param)
            allowed[i, j] = ok
    return allowed


def recount_blocks(allowed, block):
    rows = -(-allowed.shape[0] // block) * block
    cols = -(-allowed.shape[1] // block) * block
    padded = np.zeros((rows, cols), dtype=np.int64)
    padded[:allowed.shape[0], :allowed.shape[1]] = allowed
    return padded.reshape(rows // block, block, cols // block, block).sum(axis=(1, 3))


def listed(num, idx):
    """The block sets a (counts, indices) pair lists, as a boolean map."""
    out = np.zeros(idx.shape, dtype=bool)
    for row, (n, cols) in enumerate(zip(num, idx)):
        assert len(set(cols[:n].tolist())) == n
        assert (np.diff(cols[:n]) > 0).all(), "listed blocks ascend"
        out[row, cols[:n]] = True
    return out


def check(plan, rank, key_order, shard_len=None):
    got = bm.rank_block_mask(plan, rank, key_order, shard_len)
    shard_len = plan.shard_len if shard_len is None else shard_len
    q = np.full(shard_len, -1, dtype=np.int64)
    q[:plan.shard_len] = plan.positions[rank]
    if key_order == "row":
        keys = np.arange(plan.tokens)
    else:
        grid = np.full((plan.cp, shard_len), -1, dtype=np.int64)
        grid[:, :plan.shard_len] = plan.positions
        keys = grid.reshape(-1)
    allowed = dense_allowed(q, keys, plan.tokens,
                            None if plan.doc_lengths is None else list(plan.doc_lengths),
                            plan.mask)
    want = recount_blocks(allowed, plan.block_size)
    assert (got.q_positions == q).all() and (got.kv_positions == keys).all()
    assert got.block_pairs.shape == want.shape
    assert (got.block_pairs == want).all(), (plan.used, rank, key_order)
    full = want == plan.block_size ** 2
    assert (listed(got.full_kv_num_blocks, got.full_kv_indices) == full).all()
    assert (listed(got.kv_num_blocks, got.kv_indices) == ((want > 0) & ~full)).all()
    assert got.kv_indices.dtype == np.int32 and got.kv_num_blocks.dtype == np.int32
    # Documents as the mask_mod reads them: pads never match.
    real_q, real_k = q >= 0, keys >= 0
    assert (got.q_docs[~real_q] == -1).all() and (got.kv_docs[~real_k] == -2).all()
    return got


MASKS = ["causal", "full", "sliding:37", "prefix:20"]
STRATEGIES = ["contiguous", "head_tail", "striped", "per_document", "per_document_padded",
              "ptrr", "balanced", "auto"]


@pytest.mark.parametrize("mask", MASKS)
def test_random_rows_every_strategy_both_key_orders(mask, balancer):
    rng = np.random.default_rng(20261126)
    for _ in range(4):
        cp = int(rng.integers(1, 5))
        block = int(rng.choice([4, 8, 16]))
        docs = [int(n) for n in rng.integers(1, 90, size=int(rng.integers(1, 6)))]
        for strategy in STRATEGIES:
            plan = balancer.plan_cp(strategy, cp=cp, doc_lengths=docs, block_size=block,
                                    mask=mask)
            for rank in range(cp):
                row = check(plan, rank, "row")
                gathered = check(plan, rank, "gathered")
                # Pairs do not depend on where the keys sit; in row order the
                # non-empty blocks are the plan's tiles.
                assert row.pairs == gathered.pairs == plan.rank_pairs[rank]
                assert row.tiles == plan.rank_tiles[rank], (strategy, docs, cp, block)


def test_extended_shards_and_single_document(balancer):
    plan = balancer.plan_cp("per_document_padded", cp=3, doc_lengths=[13, 29, 5], block_size=8)
    assert plan.padding > 0
    for rank in range(3):
        got = check(plan, rank, "gathered", shard_len=plan.shard_len + 7)
        assert got.q_len == plan.shard_len + 7 and got.kv_len == 3 * (plan.shard_len + 7)
    plan = balancer.plan_cp("head_tail", cp=2, tokens=64, block_size=16)
    for rank in range(2):
        got = check(plan, rank, "row")
        assert got.full_tiles > 0, "a causal row of whole blocks has full blocks"


def test_refusals(balancer):
    plan = balancer.plan_cp("contiguous", cp=2, tokens=10, block_size=4)
    with pytest.raises(FulcrumError, match="key_order 'sorted' is unknown"):
        bm.rank_block_mask(plan, 0, "sorted")
    with pytest.raises(FulcrumError, match="rank 2 is outside"):
        bm.rank_block_mask(plan, 2)
    with pytest.raises(FulcrumError, match="shorter than the plan"):
        bm.rank_block_mask(plan, 0, shard_len=plan.shard_len - 1)
