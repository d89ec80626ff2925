"""The PyTorch adapters' index tensors against the plans they come from."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed")
from fulcrum import torch_cp  # noqa: E402


def shards(indices, cp):
    """What PyTorch's CP gives each rank: x[:, idx] cut into cp equal chunks."""
    tokens = indices.shape[-1]
    x = torch.arange(tokens).unsqueeze(0).expand(indices.shape[0], -1)
    return torch.gather(x, 1, indices).chunk(cp, dim=1)


@pytest.mark.parametrize("strategy", ["contiguous", "head_tail", "striped", "per_document",
                                      "balanced", "auto"])
def test_indices_shard_as_the_plan_says(strategy, balancer):
    plan = balancer.plan_cp(strategy, cp=4, doc_lengths=[512, 128, 1024, 384], block_size=64)
    idx = torch_cp.rearrange_indices(plan)
    assert idx.dtype == torch.int64
    assert tuple(idx.shape) == (1, plan.cp * plan.shard_len)
    for r, chunk in enumerate(shards(idx, plan.cp)):
        want = np.where(plan.positions[r] >= 0, plan.positions[r], -1)
        got = chunk[0].numpy()
        real = want >= 0
        assert (got[real] == want[real]).all()
        assert (got[~real] >= plan.tokens).all()  # pads index the appended tail
    restore = torch_cp.restore_indices(plan)
    assert (restore == torch.argsort(idx, dim=-1)).all()
    x = torch.arange(idx.shape[-1]).unsqueeze(0)
    assert (x[:, idx[0]][:, restore[0]] == x).all()


def test_padded_plan_and_pad_sequence(balancer):
    plan = balancer.plan_cp("per_document_padded", cp=4, doc_lengths=[30, 50, 21], block_size=8)
    assert plan.padding > 0, "this row is chosen to need padding"
    idx = torch_cp.rearrange_indices(plan)
    assert idx.shape[-1] == plan.tokens + plan.padding
    tokens = torch.arange(plan.tokens).unsqueeze(0)
    padded = torch_cp.pad_sequence(tokens, idx.shape[-1], seq_dim=1, value=-7)
    assert padded.shape[-1] == idx.shape[-1] and (padded[0, plan.tokens:] == -7).all()
    flat = padded[:, idx[0]][0].numpy()
    positions = plan.positions.reshape(-1)
    assert (flat[positions >= 0] == positions[positions >= 0]).all()
    assert (flat[positions < 0] == -7).all()


def test_batch_rows_give_b_by_n_and_mismatched_rows_are_refused(balancer):
    rows = [[256, 256], [100, 400, 12], [512]]
    plans = [balancer.plan_cp("head_tail", cp=4, doc_lengths=r, block_size=16) for r in rows]
    idx = torch_cp.rearrange_indices(plans)
    assert tuple(idx.shape) == (3, 512)
    for b, plan in enumerate(plans):
        assert (idx[b].numpy() == plan.positions.reshape(-1)).all()
    other = balancer.plan_cp("contiguous", cp=4, tokens=520)
    with pytest.raises(torch_cp.FulcrumError, match="rows of one batch differ"):
        torch_cp.rearrange_indices([plans[0], other])


def test_load_balancer_generate_indices(balancer):
    lb = torch_cp.FulcrumLoadBalancer(balancer, world_size=4, doc_lengths=[[300, 212], [512]],
                                      strategy="auto", block_size=32)
    plans = [balancer.plan_cp("auto", cp=4, doc_lengths=d, block_size=32)
             for d in ([300, 212], [512])]
    idx = lb._generate_indices()
    assert tuple(idx.shape) == (2, lb.padded_length)
    assert (idx == torch_cp.rearrange_indices(plans)).all()
    # Each row's shards, cut out of the common length, are that row's plan.
    for b, plan in enumerate(plans):
        for r, chunk in enumerate(idx[b].chunk(4)):
            head = chunk[:plan.shard_len].numpy()
            real = plan.positions[r] >= 0
            assert (head[real] == plan.positions[r][real]).all()
            assert (head[~real] >= 512).all() and (chunk[plan.shard_len:] >= 512).all()
    restore = lb._generate_indices(restore=True)
    assert (torch.gather(idx, 1, restore) == torch.arange(idx.shape[-1]).expand(2, -1)).all()
    if torch_cp._TorchLoadBalancer is not object:
        assert isinstance(lb, torch_cp._TorchLoadBalancer)
    single = torch_cp.FulcrumLoadBalancer(balancer, world_size=2, seq_length=64,
                                          strategy="head_tail", block_size=4)
    assert tuple(single._generate_indices().shape) == (1, 64)


def test_split_samples_over_dp_ranks(balancer):
    rng = np.random.default_rng(7)
    samples = [torch.zeros(int(n)) for n in rng.integers(1, 3000, size=37)]
    per_rank, part = torch_cp.split_samples(balancer, samples, 4, cost="attention")
    want = balancer.partition_dp([len(s) for s in samples], 4, "auto", cost="attention")
    assert [r.tolist() for r in part.ranks] == [r.tolist() for r in want.ranks]
    for rank, indices in zip(per_rank, want.ranks):
        assert [id(s) for s in rank] == [id(samples[i]) for i in indices]
    by_index, _ = torch_cp.split_samples(balancer, None, 4, lengths=[len(s) for s in samples],
                                         cost="attention")
    assert by_index == [r.tolist() for r in want.ranks]
    with pytest.raises(torch_cp.FulcrumError, match="one length per sample"):
        torch_cp.split_samples(balancer, samples, 4, lengths=[1, 2])
