"""The kernels that judge the plans, and the reference they are checked by.

flex: FlexAttention with a BlockMask built from the rank's block counts
(BlockMask.from_kv_blocks, so no (queries x N) mask is ever materialised on
the device); partial blocks evaluate the mask_mod from global positions and
document ids, full blocks skip it, empty blocks are never visited.

varlen: FlashAttention's variable-length kernel where PyTorch exposes it. It
has no block mask: a rank's queries are cut into runs of consecutive
positions of one document, and each run is one sequence whose keys are its
document's prefix up to the run's last query (bottom-right causal alignment).
Document-causal only.

reference: unsharded float32 attention of the whole row with the dense mask,
restricted to the rank's queries; its gradients are those of the rank's own
outputs only. On the CPU the rank's side is the same math on the rank's
dense mask (what the tests run); on the GPU it is the kernel under test.
"""

import math
import statistics

import numpy as np

from .masks import PAD, block_structure, dense_mask, doc_ids


def features():
    """What the installed torch offers: {name: bool or text}."""
    found = {"torch": None, "cuda": False, "flex": False, "varlen": False, "device_name": None}
    try:
        import torch
    except ImportError:
        return found
    found["torch"] = torch.__version__
    found["cuda"] = bool(torch.cuda.is_available())
    if found["cuda"]:
        found["device_name"] = torch.cuda.get_device_name(0)
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
        found["flex"] = hasattr(flex_attention, "BlockMask")
    except Exception:
        found["flex"] = False
    found["varlen"] = varlen_entry() is not None
    return found


def varlen_entry():
    """PyTorch's varlen kernel (torch.nn.attention.varlen.varlen_attn, 2.9+)
    as a causal callable (q, k, v, cu_q, cu_k, max_q, max_k) -> out, or None.
    Its causal switch moved from is_causal (2.9) to window_size=(-1, 0)
    (2.10+); both align the mask bottom-right, as the layout needs."""
    try:
        import inspect

        from torch.nn.attention.varlen import varlen_attn
    except Exception:  # torch without the module
        return None
    parameters = inspect.signature(varlen_attn).parameters
    causal = {"is_causal": True} if "is_causal" in parameters else {"window_size": (-1, 0)}

    def call(q, k, v, cu_q, cu_k, max_q, max_k):
        return varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, **causal)
    return call


def kv_block_lists(blocks):
    """A BlockMask's per-query-block lists from a boolean (query blocks x key
    blocks) map: (counts, indices), indices holding each row's set key blocks
    first, in key order (what follows a row's count is never read)."""
    blocks = np.asarray(blocks, dtype=bool)
    order = np.argsort(~blocks, axis=1, kind="stable").astype(np.int32)
    return blocks.sum(axis=1).astype(np.int32), order


def flex_block_mask(positions, doc_lengths, mask, block, counts, device):
    """The rank's BlockMask: (1, 1, len(positions), N)."""
    import torch
    from torch.nn.attention.flex_attention import BlockMask

    nonempty, full = block_structure(counts, block)

    def lists(blocks):
        num, idx = kv_block_lists(blocks)
        return (torch.as_tensor(num, device=device).view(1, 1, -1),
                torch.as_tensor(idx, device=device).view(1, 1, *idx.shape))

    kv_num, kv_idx = lists(nonempty & ~full)
    full_num, full_idx = lists(full)
    ids = doc_ids(doc_lengths)
    positions = np.asarray(positions, dtype=np.int64)
    # The kernel may evaluate the mask on the padded tail of a last, short
    # block: the tables run to whole blocks, the tail matching nothing (pad
    # queries have document -1, tail keys -2).
    q_len = -(-positions.size // block) * block
    k_len = -(-ids.size // block) * block
    qpos = np.full(q_len, PAD, dtype=np.int64)
    qpos[:positions.size] = positions
    qdoc = np.where(qpos != PAD, ids[np.maximum(qpos, 0)], -1)
    kdoc = np.full(k_len, -2, dtype=np.int64)
    kdoc[:ids.size] = ids
    qpos_t, qdoc_t, kdoc_t = (torch.as_tensor(a, device=device) for a in (qpos, qdoc, kdoc))
    window = mask.window

    def mask_mod(b, h, q_idx, kv_idx):
        p = qpos_t[q_idx]
        allowed = (qdoc_t[q_idx] == kdoc_t[kv_idx]) & (kv_idx <= p)
        if window:
            allowed = allowed & (p - kv_idx < window)
        return allowed

    return BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=block,
                                    mask_mod=mask_mod,
                                    seq_lengths=(positions.size, int(ids.size)))


def make_inputs(shard_len, tokens, heads, kv_heads, head_dim, dtype, device, seed=0):
    """Rank-local q (1, H, S, D) and the row's k, v (1, Hkv, N, D), with grads."""
    import torch
    generator = torch.Generator(device="cpu").manual_seed(seed)

    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float32).to(
            device=device, dtype=dtype).requires_grad_(True)
    return (draw(1, heads, shard_len, head_dim), draw(1, kv_heads, tokens, head_dim),
            draw(1, kv_heads, tokens, head_dim))


def compiled_flex():
    import torch
    from torch.nn.attention.flex_attention import flex_attention
    import torch._dynamo
    # One compilation per (shard length, row length); the default cache of 8
    # would fall back to the unfused, dense path silently.
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 512)
    return torch.compile(flex_attention, dynamic=False)


def time_fwd_bwd(run, inputs, reps, warmup):
    """Median forward and backward milliseconds by CUDA events. run(*inputs)
    returns the output; backward is driven by a fixed upstream gradient."""
    import torch
    out = run(*inputs)
    grad = torch.randn_like(out)
    for _ in range(warmup):
        for t in inputs:
            t.grad = None
        run(*inputs).backward(grad)
    torch.cuda.synchronize()
    fwd, bwd = [], []
    for _ in range(reps):
        for t in inputs:
            t.grad = None
        start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        start.record()
        out = run(*inputs)
        mid.record()
        out.backward(grad)
        end.record()
        end.synchronize()
        fwd.append(start.elapsed_time(mid))
        bwd.append(mid.elapsed_time(end))
    return statistics.median(fwd), statistics.median(bwd)


def varlen_layout(positions, doc_lengths):
    """Runs of one rank's queries for the varlen kernel: (query slots,
    key positions, cu_q, cu_k, max_q, max_k). Each run is consecutive
    positions of one document; its keys are that document's start up to the
    run's last position."""
    positions = np.asarray(positions, dtype=np.int64)
    ids = doc_ids(doc_lengths)
    starts = np.zeros(len(doc_lengths) + 1, dtype=np.int64)
    np.cumsum(doc_lengths, out=starts[1:])
    slots = np.flatnonzero(positions != PAD)
    q = positions[slots]
    if q.size == 0:
        return slots, np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64), 0, 0
    breaks = np.ones(q.size, dtype=bool)
    breaks[1:] = (q[1:] != q[:-1] + 1) | (ids[q[1:]] != ids[q[:-1]])
    first = np.flatnonzero(breaks)
    last = np.append(first[1:], q.size) - 1
    begin = starts[ids[q[first]]]
    key_len = q[last] - begin + 1
    keys = np.concatenate([np.arange(b, b + n) for b, n in zip(begin, key_len)])
    q_len = last - first + 1
    cu_q = np.concatenate([[0], np.cumsum(q_len)])
    cu_k = np.concatenate([[0], np.cumsum(key_len)])
    return slots, keys, cu_q, cu_k, int(q_len.max()), int(key_len.max())


def reference_check(positions, doc_lengths, mask, heads, kv_heads, head_dim, kernel=None,
                    device="cpu", dtype=None, seed=0):
    """Largest error of one rank's output and gradients against the unsharded
    float32 reference, each relative to the reference's largest magnitude:
    {"out": e, "dq": e, "dk": e, "dv": e}. kernel(q, k, v) is the rank's
    attention ((1, H, S, D) queries in plan order, the row's keys); None runs
    the dense masked math on the CPU."""
    import torch
    positions = np.asarray(positions, dtype=np.int64)
    tokens = int(np.sum(doc_lengths))
    generator = torch.Generator().manual_seed(seed)
    q_all = torch.randn(1, heads, tokens, head_dim, generator=generator)
    k_all = torch.randn(1, kv_heads, tokens, head_dim, generator=generator)
    v_all = torch.randn(1, kv_heads, tokens, head_dim, generator=generator)
    slots = np.flatnonzero(positions != PAD)
    g_rank = torch.randn(1, heads, positions.size, head_dim, generator=generator)
    g_rank[:, :, torch.as_tensor(positions == PAD)] = 0

    # Unsharded: the whole row, then the rank's queries' outputs only.
    q_ref, k_ref, v_ref = (t.clone().requires_grad_(True) for t in (q_all, k_all, v_all))
    full = torch.as_tensor(dense_mask(np.arange(tokens), doc_lengths, mask))
    out_ref = masked_attention(q_ref, k_ref, v_ref, full)
    pos_real = torch.as_tensor(positions[slots])
    (out_ref[:, :, pos_real] * g_rank[:, :, torch.as_tensor(slots)]).sum().backward()

    # The rank: its queries in plan order (pads are zero rows), all keys.
    q_rank = torch.zeros(1, heads, positions.size, head_dim)
    q_rank[:, :, torch.as_tensor(slots)] = q_all[:, :, pos_real]
    if kernel is None:
        local = torch.as_tensor(dense_mask(positions, doc_lengths, mask))
        args = [t.clone().requires_grad_(True) for t in (q_rank, k_all, v_all)]
        out = masked_attention(*args, local)
    else:
        args = [t.clone().to(device=device, dtype=dtype).requires_grad_(True)
                for t in (q_rank, k_all, v_all)]
        out = kernel(*args)
    out.backward(g_rank.to(device=out.device, dtype=out.dtype))
    sl = torch.as_tensor(slots)

    def err(got, want):
        got = got.detach().float().cpu()
        scale = float(want.abs().max()) or 1.0
        return float((got - want).abs().max()) / scale

    dq_ref = torch.zeros_like(q_rank)
    dq_ref[:, :, sl] = q_ref.grad[:, :, pos_real]
    return {"out": err(out[:, :, sl], out_ref[:, :, pos_real].detach()),
            "dq": err(args[0].grad, dq_ref), "dk": err(args[1].grad, k_ref.grad),
            "dv": err(args[2].grad, v_ref.grad)}


def masked_attention(q, k, v, allowed):
    """softmax(q k^T / sqrt(D) masked) v with grouped KV heads; rows that see
    no key give zeros."""
    import torch
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~allowed, float("-inf"))
    seen = allowed.any(dim=-1, keepdim=True)
    probs = torch.softmax(scores.masked_fill(~seen, 0.0), dim=-1) * seen
    return torch.matmul(probs, v)
