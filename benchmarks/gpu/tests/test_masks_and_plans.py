"""The harness's masks against a pair-by-pair recount, and against the plans'
tiles and pairs as the fulcrum CLI reports them."""

import zlib

import numpy as np
import pytest

from gpubench import kernels, masks, plans

MASKS = [masks.MaskSpec("causal"), masks.MaskSpec("sliding", 37), masks.MaskSpec("sliding", 300)]


def random_row(rng, tokens):
    cuts = np.sort(rng.choice(np.arange(1, tokens), size=rng.integers(0, 8), replace=False))
    return np.diff(np.concatenate([[0], cuts, [tokens]])).tolist()


def brute_block_counts(positions, doc_lengths, mask, block):
    """Pair by pair from the dense mask, summed over each B x B block."""
    dense = masks.dense_mask(positions, doc_lengths, mask)
    q_blocks = -(-dense.shape[0] // block)
    k_blocks = -(-dense.shape[1] // block)
    padded = np.zeros((q_blocks * block, k_blocks * block), dtype=np.int64)
    padded[:dense.shape[0], :dense.shape[1]] = dense
    return padded.reshape(q_blocks, block, k_blocks, block).sum(axis=(1, 3))


def test_dense_mask_is_document_causal_pair_by_pair():
    doc_lengths = [3, 5, 2]
    positions = np.array([9, 0, -1, 4, 7])
    allowed = masks.dense_mask(positions, doc_lengths, masks.MaskSpec("causal"))
    doc = [0, 0, 0, 1, 1, 1, 1, 1, 2, 2]
    for row, q in enumerate(positions):
        for k in range(10):
            want = q >= 0 and doc[k] == doc[q] and k <= q
            assert allowed[row, k] == want, (row, k)
    window = masks.dense_mask(positions, doc_lengths, masks.MaskSpec("sliding", 2))
    assert window[3].tolist() == [k in (3, 4) for k in range(10)]  # q = 4: keys 3 and 4


@pytest.mark.parametrize("seed", range(6))
def test_block_counts_equal_the_dense_recount(seed):
    rng = np.random.default_rng(seed)
    tokens = int(rng.integers(50, 700))
    doc_lengths = random_row(rng, tokens)
    block = int(rng.choice([1, 7, 16, 64]))
    for mask in MASKS:
        # An arbitrary order with pads: the counts may not rely on plan shape.
        positions = np.concatenate([rng.permutation(tokens), -np.ones(rng.integers(0, 9), int)])
        rng.shuffle(positions)
        got = masks.block_counts(positions, doc_lengths, mask, block)
        want = brute_block_counts(positions, doc_lengths, mask, block)
        np.testing.assert_array_equal(got, want)
        nonempty, full = masks.block_structure(got, block)
        dense = masks.dense_mask(positions, doc_lengths, mask)
        for i, j in zip(*np.nonzero(full)):
            assert dense[i * block:(i + 1) * block, j * block:(j + 1) * block].all()
            assert dense[i * block:(i + 1) * block, j * block:(j + 1) * block].shape == (block,
                                                                                        block)


@pytest.mark.parametrize("strategy", plans.FULCRUM_STRATEGIES)
@pytest.mark.parametrize("mask", MASKS, ids=str)
def test_block_structure_has_the_plans_tiles_and_pairs(cli, strategy, mask):
    rng = np.random.default_rng(zlib.crc32(f"{strategy} {mask}".encode()))
    for _ in range(3):
        tokens = int(rng.integers(200, 1500))
        doc_lengths = random_row(rng, tokens)
        cp = int(rng.choice([2, 3, 4]))
        block = int(rng.choice([16, 32, 64]))
        positions, info = plans.plan(strategy, doc_lengths, cp, mask, block, cli)
        assert plans.check_permutation(positions, tokens)
        summaries = [masks.rank_summary(p, doc_lengths, mask, block) for p in positions]
        assert [s["tiles"] for s in summaries] == info["cli_tiles"]
        assert [s["pairs"] for s in summaries] == info["cli_pairs"]
        for p, s in zip(positions, summaries):
            recount = brute_block_counts(p, doc_lengths, mask, block)
            assert s["tiles"] == int((recount > 0).sum())
            assert s["full_tiles"] == int((recount == block * block).sum())


def test_a_wrong_order_changes_the_tiles(cli):
    """The tile check can fail: the same tokens in another order within a
    rank give other tiles. Head-tail's chunks interleaved token by token (the
    order PyTorch's docstring sketches, head ascending beside tail
    descending) put late queries in every block."""
    doc_lengths = [700]
    mask = masks.MaskSpec("causal")
    positions, info = plans.plan("head_tail", doc_lengths, 2, mask, 32, cli)
    own = positions[0]
    half = own.size // 2
    reordered = np.empty_like(own)
    reordered[0::2], reordered[1::2] = own[:half], own[half:][::-1]
    assert sorted(reordered) == sorted(own)
    assert masks.rank_summary(reordered, doc_lengths, mask, 32)["tiles"] > info["cli_tiles"][0]


@pytest.mark.parametrize("seed", range(4))
def test_varlen_layout_covers_exactly_the_causal_mask(seed):
    """Each run's queries against its keys with bottom-right causal alignment
    allow exactly the pairs of the dense document-causal mask."""
    rng = np.random.default_rng(seed)
    tokens = int(rng.integers(100, 600))
    doc_lengths = random_row(rng, tokens)
    positions = np.concatenate([rng.permutation(tokens)[: tokens // 2], [-1, -1]])
    slots, keys, cu_q, cu_k, max_q, max_k = kernels.varlen_layout(positions, doc_lengths)
    implied = np.zeros((positions.size, tokens), dtype=bool)
    for seq in range(cu_q.size - 1):
        q_slots = slots[cu_q[seq]:cu_q[seq + 1]]
        k_pos = keys[cu_k[seq]:cu_k[seq + 1]]
        nq, nk = q_slots.size, k_pos.size
        assert nq <= max_q and nk <= max_k
        for i, slot in enumerate(q_slots):
            implied[slot, k_pos[: nk - nq + i + 1]] = True  # bottom-right causal
    want = masks.dense_mask(positions, doc_lengths, masks.MaskSpec("causal"))
    np.testing.assert_array_equal(implied, want)


def test_torch_balancers_are_imported_or_reported_undefined():
    module, why = plans.torch_balancers()
    if module is None:
        with pytest.raises(plans.Undefined, match="has no _HeadTailLoadBalancer|not installed"):
            plans.torch_plan("torch_head_tail", [8], 2, masks.MaskSpec("causal"), 2)
        return
    # PyTorch's own head-tail: rank r holds chunk r then chunk 2P-1-r.
    got = plans.torch_plan("torch_head_tail", [8], 2, masks.MaskSpec("causal"), 2)
    assert got.tolist() == [[0, 1, 6, 7], [2, 3, 4, 5]]
    with pytest.raises(plans.Undefined, match="refused"):
        plans.torch_plan("torch_head_tail", [9], 2, masks.MaskSpec("causal"), 2)
    ptrr = plans.torch_plan("torch_ptrr", [64, 64], 2, masks.MaskSpec("causal"), 16)
    assert plans.check_permutation(ptrr, 128)


@pytest.fixture(scope="module")
def package_planner():
    import os
    from gpubench import rows
    path = plans.default_plugin(rows.REPO_ROOT)
    if not os.path.isfile(path):
        pytest.skip(f"no plugin at {path}: build it or set FULCRUM_PLUGIN")
    pytest.importorskip("numpy")
    return plans.PackagePlanner(rows.REPO_ROOT, path)


@pytest.mark.parametrize("strategy", plans.FULCRUM_STRATEGIES)
def test_the_python_package_plans_what_the_cli_plans(cli, package_planner, strategy):
    """Where the CLI cannot run, the plugin through python/fulcrum serves the
    harness: same positions, same tiles."""
    rng = np.random.default_rng(5)
    for mask in MASKS:
        doc_lengths = random_row(rng, int(rng.integers(300, 2000)))
        by_cli, cli_info = plans.plan(strategy, doc_lengths, 4, mask, 32, cli)
        by_package, package_info = plans.plan(strategy, doc_lengths, 4, mask, 32, package_planner)
        np.testing.assert_array_equal(by_cli, by_package)
        # The host's selector and the package word a fallback differently.
        assert (cli_info.pop("fallback_reason") is None) == \
            (package_info.pop("fallback_reason") is None)
        assert cli_info == package_info


def test_kv_block_lists_hold_each_rows_blocks_in_key_order():
    blocks = np.array([[0, 1, 0, 1, 1], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1], [0, 0, 1, 0, 0]],
                      dtype=bool)
    counts, indices = kernels.kv_block_lists(blocks)
    assert counts.tolist() == [3, 0, 5, 1]
    for row, n in enumerate(counts):
        assert indices[row, :n].tolist() == np.flatnonzero(blocks[row]).tolist()
    assert indices.dtype == np.int32 and counts.dtype == np.int32
