"""fulcrum.torch (the PyTorch adapters) against the plans they come from; the
parts that need no PyTorch CP class, so they run on any torch (Debian's 1.13
included). benchmarks/gpu/tests/test_torch_cp_classes.py holds the adapters
to PyTorch's own CP classes where the installed torch has them."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed")
from fulcrum import torch as ft  # noqa: E402
from fulcrum import torch_cp as old_name  # noqa: E402


def shards(indices, cp):
    """What PyTorch's CP gives each rank: x[:, idx] cut into cp equal chunks."""
    tokens = indices.shape[-1]
    x = torch.arange(tokens).unsqueeze(0).expand(indices.shape[0], -1)
    return torch.gather(x, 1, indices).chunk(cp, dim=1)


@pytest.mark.parametrize("strategy", ["contiguous", "head_tail", "striped", "per_document",
                                      "balanced", "auto"])
def test_indices_shard_as_the_plan_says(strategy, balancer):
    plan = balancer.plan_cp(strategy, cp=4, doc_lengths=[512, 128, 1024, 384], block_size=64)
    idx = ft.rearrange_indices(plan)
    assert idx.dtype == torch.int64
    assert tuple(idx.shape) == (1, plan.cp * plan.shard_len)
    for r, chunk in enumerate(shards(idx, plan.cp)):
        want = np.where(plan.positions[r] >= 0, plan.positions[r], -1)
        got = chunk[0].numpy()
        real = want >= 0
        assert (got[real] == want[real]).all()
        assert (got[~real] >= plan.tokens).all()  # pads index the appended tail
    restore = ft.restore_indices(plan)
    assert (restore == torch.argsort(idx, dim=-1)).all()
    x = torch.arange(idx.shape[-1]).unsqueeze(0)
    assert (x[:, idx[0]][:, restore[0]] == x).all()


def test_padded_plan_and_pad_sequence(balancer):
    plan = balancer.plan_cp("per_document_padded", cp=4, doc_lengths=[30, 50, 21], block_size=8)
    assert plan.padding > 0, "this row is chosen to need padding"
    idx = ft.rearrange_indices(plan)
    assert idx.shape[-1] == plan.tokens + plan.padding
    tokens = torch.arange(plan.tokens).unsqueeze(0)
    padded = ft.pad_sequence(tokens, idx.shape[-1], seq_dim=1, value=-7)
    assert padded.shape[-1] == idx.shape[-1] and (padded[0, plan.tokens:] == -7).all()
    flat = padded[:, idx[0]][0].numpy()
    positions = plan.positions.reshape(-1)
    assert (flat[positions >= 0] == positions[positions >= 0]).all()
    assert (flat[positions < 0] == -7).all()


def test_batch_rows_give_b_by_n_and_mismatched_rows_are_refused(balancer):
    rows = [[256, 256], [100, 400, 12], [512]]
    plans = [balancer.plan_cp("head_tail", cp=4, doc_lengths=r, block_size=16) for r in rows]
    idx = ft.rearrange_indices(plans)
    assert tuple(idx.shape) == (3, 512)
    for b, plan in enumerate(plans):
        assert (idx[b].numpy() == plan.positions.reshape(-1)).all()
    other = balancer.plan_cp("contiguous", cp=4, tokens=520)
    with pytest.raises(ft.FulcrumError, match="rows of one batch differ"):
        ft.rearrange_indices([plans[0], other])


def test_load_balancer_generate_indices(balancer):
    lb = ft.FulcrumLoadBalancer(balancer, world_size=4, doc_lengths=[[300, 212], [512]],
                                      strategy="auto", block_size=32)
    plans = [balancer.plan_cp("auto", cp=4, doc_lengths=d, block_size=32)
             for d in ([300, 212], [512])]
    idx = lb._generate_indices()
    assert tuple(idx.shape) == (2, lb.padded_length)
    assert (idx == ft.rearrange_indices(plans)).all()
    # Each row's shards, cut out of the common length, are that row's plan.
    for b, plan in enumerate(plans):
        for r, chunk in enumerate(idx[b].chunk(4)):
            head = chunk[:plan.shard_len].numpy()
            real = plan.positions[r] >= 0
            assert (head[real] == plan.positions[r][real]).all()
            assert (head[~real] >= 512).all() and (chunk[plan.shard_len:] >= 512).all()
    restore = lb._generate_indices(restore=True)
    assert (torch.gather(idx, 1, restore) == torch.arange(idx.shape[-1]).expand(2, -1)).all()
    if ft._TorchLoadBalancer is not object:
        assert isinstance(lb, ft._TorchLoadBalancer)
    single = ft.FulcrumLoadBalancer(balancer, world_size=2, seq_length=64,
                                          strategy="head_tail", block_size=4)
    assert tuple(single._generate_indices().shape) == (1, 64)


def test_split_samples_over_dp_ranks(balancer):
    rng = np.random.default_rng(7)
    samples = [torch.zeros(int(n)) for n in rng.integers(1, 3000, size=37)]
    per_rank, part = ft.split_samples(balancer, samples, 4, cost="attention")
    want = balancer.partition_dp([len(s) for s in samples], 4, "auto", cost="attention")
    assert [r.tolist() for r in part.ranks] == [r.tolist() for r in want.ranks]
    for rank, indices in zip(per_rank, want.ranks):
        assert [id(s) for s in rank] == [id(samples[i]) for i in indices]
    by_index, _ = ft.split_samples(balancer, None, 4, lengths=[len(s) for s in samples],
                                         cost="attention")
    assert by_index == [r.tolist() for r in want.ranks]
    with pytest.raises(ft.FulcrumError, match="one length per sample"):
        ft.split_samples(balancer, samples, 4, lengths=[1, 2])


def test_the_old_module_name_is_the_same_module():
    for name in ft.__all__:
        assert getattr(old_name, name) is getattr(ft, name), name
    assert old_name._TorchLoadBalancer is ft._TorchLoadBalancer


def test_shard_keeps_what_pytorchs_sharding_keeps(balancer):
    rows = [[300, 212, 9], [521]]
    lb = ft.FulcrumLoadBalancer(balancer, world_size=3, doc_lengths=rows,
                                      strategy="per_document_padded", block_size=16)
    idx = lb._generate_indices()
    x = torch.arange(2 * 521 * 4).reshape(2, 521, 4)
    x = ft.pad_sequence(x, lb.padded_length, seq_dim=1, value=-1)
    for rank in range(3):
        got = ft.shard(x, idx, rank, 3, seq_dim=1)
        # What _context_parallel_shard does: rearrange, then the rank's chunk.
        want = torch.stack([x[b, idx[b]] for b in range(2)]).chunk(3, dim=1)[rank]
        assert torch.equal(got, want)
    one = lb._generate_indices()[:1]
    assert torch.equal(ft.shard(x, one, 1, 3), x[:, one[0]].chunk(3, dim=1)[1])
    with pytest.raises(ft.FulcrumError, match="pad_sequence the tensor"):
        ft.shard(x[:, :500], idx, 0, 3)
    with pytest.raises(ft.FulcrumError, match="not a sequence dimension"):
        ft.shard(x, idx, 0, 3, seq_dim=0)


def test_rank_block_masks_follow_the_balancers_plans(balancer):
    rows = [[300, 212], [100, 412]]
    lb = ft.FulcrumLoadBalancer(balancer, world_size=4, doc_lengths=rows,
                                      strategy="balanced", block_size=32)
    idx = lb._generate_indices()
    for rank in range(4):
        masks = lb.rank_block_masks(rank)
        for b, m in enumerate(masks):
            chunk = idx[b].chunk(4)[rank].numpy()
            real = m.q_positions >= 0
            assert (m.q_positions[real] == chunk[real]).all()
            assert (chunk[~real] >= 512).all()  # pads index the appended tail
            assert m.pairs == lb.plans[b].rank_pairs[rank]
        row = lb.rank_block_masks(rank, key_order="row")
        assert [m.tiles for m in row] == [p.rank_tiles[rank] for p in lb.plans]


def test_what_this_torch_lacks_is_said(balancer):
    found = ft.support()
    assert found.torch_version == str(torch.__version__)
    lb = ft.FulcrumLoadBalancer(balancer, world_size=2, seq_length=64, block_size=16)
    if found.from_kv_blocks:
        mask = lb.block_mask(0)
        assert tuple(mask.kv_num_blocks.shape) == (1, 1, 2)
    else:
        with pytest.raises(ft.FulcrumError, match="does not have") as error:
            lb.block_mask(0)
        assert error.value.code == "unsupported"
        assert found.torch_version in str(error.value)
    if not found.load_balancer_base:
        assert ft._TorchLoadBalancer is object


def test_sdpa_accepts_head_tail_of_one_causal_row_only(balancer):
    head_tail = ft.FulcrumLoadBalancer(balancer, world_size=4, seq_length=256,
                                             strategy="head_tail", block_size=16)
    head_tail.check_sdpa()
    for kwargs in ({"seq_length": 256, "strategy": "contiguous"},
                   {"seq_length": 256, "strategy": "balanced"},
                   {"doc_lengths": [128, 128], "strategy": "per_document"},
                   {"seq_length": 256, "strategy": "head_tail", "mask": "sliding:32"},
                   {"seq_length": 250, "strategy": "head_tail"}):
        lb = ft.FulcrumLoadBalancer(balancer, world_size=4, block_size=16, **kwargs)
        with pytest.raises(ft.FulcrumError, match="SDPA ring attention"):
            lb.check_sdpa()


@pytest.mark.parametrize("mask", ["causal", "full", "sliding:21", "prefix:17"])
def test_the_mask_mod_is_the_dense_mask(mask, balancer):
    from test_block_mask import dense_allowed

    rows = [[61, 40, 99], [200]]
    lb = ft.FulcrumLoadBalancer(balancer, world_size=3, doc_lengths=rows,
                                      strategy="balanced", block_size=16, mask=mask)
    for key_order in ("gathered", "row"):
        for rank in range(3):
            masks = lb.rank_block_masks(rank, key_order)
            mask_mod = ft.position_mask_mod(masks)
            for b, m in enumerate(masks):
                q_idx = torch.arange(m.q_len).view(-1, 1)
                kv_idx = torch.arange(m.kv_len).view(1, -1)
                got = mask_mod(torch.tensor(b), torch.tensor(0), q_idx, kv_idx).numpy()
                want = dense_allowed(m.q_positions, m.kv_positions, 200, rows[b], mask)
                assert (got == want).all(), (key_order, rank, b)
