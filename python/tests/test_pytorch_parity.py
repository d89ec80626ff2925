"""fulcrum's index tensors for the strategies named after PyTorch's CP
balancers are the indices those balancers return (docs/PYTORCH.md).

The expectations replay, with torch operations, what
torch/distributed/tensor/experimental/_context_parallel/_load_balancer.py
computes: _HeadTailLoadBalancer._generate_indices and
_PerDocumentHeadTailLoadBalancer._generate_indices_for_batch. Where the
installed torch has those classes, their own output is compared too."""

import random

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed")
from fulcrum import torch_cp  # noqa: E402

try:
    from torch.distributed.tensor.experimental._context_parallel import _load_balancer
except ImportError:  # older torch: the replay below is the reference
    _load_balancer = None


def head_tail_replay(seq_length, world_size, start=0):
    """(world_size, seq_length // world_size): row r is rank r's head chunk
    then its tail chunk."""
    chunks = torch.arange(start, start + seq_length).view(2 * world_size, -1)
    head = torch.arange(world_size)
    tail = 2 * world_size - 1 - head
    return torch.stack([chunks[head], chunks[tail]], dim=1).reshape(world_size, -1)


def per_document_replay(doc_lengths, world_size):
    starts = [sum(doc_lengths[:i]) for i in range(len(doc_lengths))]
    rows = [head_tail_replay(n, world_size, s) for n, s in zip(doc_lengths, starts)]
    return torch.cat(rows, dim=1).reshape(-1)


def document_major_replay(doc_lengths, world_size):
    """Each document's own head-tail order, documents one after another."""
    starts = [sum(doc_lengths[:i]) for i in range(len(doc_lengths))]
    return torch.cat([head_tail_replay(n, world_size, s).reshape(-1)
                      for n, s in zip(doc_lengths, starts)])


def test_head_tail_is_pytorchs_order(balancer):
    plan = balancer.plan_cp("head_tail", cp=2, tokens=8)
    assert torch_cp.rearrange_indices(plan)[0].tolist() == [0, 1, 6, 7, 2, 3, 4, 5]
    for cp in (1, 2, 3, 4, 8):
        for chunk in (1, 5, 64):
            n = 2 * cp * chunk
            idx = torch_cp.rearrange_indices(balancer.plan_cp("head_tail", cp=cp, tokens=n))
            assert idx.shape == (1, n)
            assert torch.equal(idx[0], head_tail_replay(n, cp).reshape(-1)), (cp, chunk)


@pytest.mark.parametrize("strategy", ["per_document", "per_document_padded"])
def test_per_document_is_pytorchs_rank_major_order(strategy, balancer):
    plan = balancer.plan_cp(strategy, cp=2, doc_lengths=[4, 12])
    assert torch_cp.rearrange_indices(plan)[0].tolist() == [0, 3, 4, 5, 6, 13, 14, 15,
                                                            1, 2, 7, 8, 9, 10, 11, 12]
    assert plan.rank_pairs.tolist() == [44, 44]
    rng = random.Random(189902)
    for _ in range(50):
        cp = rng.randint(1, 8)
        docs = [2 * cp * rng.randint(1, 30) for _ in range(rng.randint(1, 12))]
        idx = torch_cp.rearrange_indices(balancer.plan_cp(strategy, cp=cp, doc_lengths=docs))
        assert torch.equal(idx[0], per_document_replay(docs, cp)), (cp, docs)


@pytest.mark.skipif(_load_balancer is None,
                    reason="the installed torch has no _context_parallel._load_balancer")
def test_against_the_installed_pytorch_balancers(balancer):
    for cp, n in ((1, 6), (2, 8), (4, 4096), (3, 1200)):
        theirs = _load_balancer._HeadTailLoadBalancer(n, cp, "cpu")._generate_indices()
        ours = torch_cp.rearrange_indices(balancer.plan_cp("head_tail", cp=cp, tokens=n))
        assert torch.equal(ours.to(theirs.dtype), theirs), (cp, n)
    rows = [[4, 12], [8, 8]]
    theirs = _load_balancer._PerDocumentHeadTailLoadBalancer(rows, 2, "cpu")._generate_indices()
    ours = torch_cp.rearrange_indices(
        [balancer.plan_cp("per_document", cp=2, doc_lengths=r) for r in rows])
    if torch.equal(ours.to(theirs.dtype), theirs):
        return
    # Releases before PyTorch's rank-major fix (PR #189902; 2.11.0 is one)
    # concatenate each document's own head-tail order, so a contiguous shard
    # cuts mid-document. fulcrum follows the fix; anything else is a failure.
    assert torch.equal(theirs, torch.stack([document_major_replay(r, 2) for r in rows])), theirs
    pytest.skip(f"torch {torch.__version__}'s _PerDocumentHeadTailLoadBalancer is document-major "
                "(before PR #189902); fulcrum's per_document is PyTorch main's rank-major "
                "order (docs/INTEGRATION.md)")
