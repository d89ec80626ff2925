"""Per-rank positions from fulcrum's planner and from PyTorch's own CP
balancers, in one shape: a (P, shard_len) int64 array, -1 for padding.

fulcrum's plans come from the CLI (`fulcrum plan --format json --positions`),
so what is timed is what the host would run. PyTorch's balancers are imported
from the installed torch, never re-implemented: where the installed torch has
none, or a balancer refuses the row (head-tail needs N divisible by 2P, PTRR
N divisible by P x B), the strategy is reported as undefined with the reason.
"""

import json
import os
import subprocess
import tempfile

import numpy as np

from .masks import PAD, block_counts, block_structure

FULCRUM_STRATEGIES = ("contiguous", "head_tail", "per_document", "ptrr", "balanced", "auto")
TORCH_STRATEGIES = ("torch_head_tail", "torch_ptrr")


class Undefined(Exception):
    """A strategy that cannot shard this row; the message says why."""


def default_cli(repo_root):
    return os.environ.get("FULCRUM_CLI") or os.path.join(repo_root, "build", "release", "bin",
                                                         "fulcrum")


def default_plugin(repo_root):
    return os.environ.get("FULCRUM_PLUGIN") or os.path.join(
        repo_root, "build", "release", "lib", "fulcrum", "libfulcrum_balancer.so")


class PackagePlanner:
    """fulcrum's plans through the Python package (python/fulcrum, the plugin
    over its C ABI), for a machine where the CLI cannot run (its shared
    libraries are missing) but the plugin, which needs only libstdc++, can.
    Same strategies, same fallback (contiguous) as the CLI's defaults."""

    def __init__(self, repo_root, plugin_path):
        import sys
        package_root = os.path.join(repo_root, "python")
        if package_root not in sys.path:
            sys.path.insert(0, package_root)
        import fulcrum
        # The checkout's build tree is this user's own; the permission check
        # guards installed plugin directories.
        self.balancer = fulcrum.load(plugin_path, check_permissions=False)
        self.description = f"python/fulcrum over {plugin_path}"

    def plan(self, doc_lengths, cp, strategy, mask, block):
        answer = self.balancer.plan_cp(strategy, cp=cp, doc_lengths=[int(x) for x in doc_lengths],
                                       block_size=block, mask=str(mask))
        return np.asarray(answer.positions, dtype=np.int64), {
            "used": answer.used, "fallback_reason": answer.fallback_reason,
            "padding": answer.padding,
            "ranks": [{"tiles": int(t), "pairs": int(p)}
                      for t, p in zip(answer.rank_tiles, answer.rank_pairs)]}


def fulcrum_plan(cli, doc_lengths, cp, strategy, mask, block):
    """The CLI's plan as (positions (P, shard_len), answer dict without the
    positions); `cli` may also be a PackagePlanner."""
    if isinstance(cli, PackagePlanner):
        return cli.plan(doc_lengths, cp, strategy, mask, block)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([int(x) for x in doc_lengths], f)
        lengths_file = f.name
    try:
        cmd = [cli, "plan", "--cp", str(cp), "--strategy", strategy, "--doc-lengths-file",
               lengths_file, "--block-size", str(block), "--mask", str(mask), "--positions",
               "--format", "json"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    finally:
        os.unlink(lengths_file)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    answer = json.loads(done.stdout)
    positions = np.array([rank.pop("positions") for rank in answer["ranks"]], dtype=np.int64)
    return positions, answer


def torch_balancers():
    """(module, None) with PyTorch's _HeadTailLoadBalancer and
    _PTRRLoadBalancer, or (None, why not)."""
    try:
        import torch
    except ImportError as error:
        return None, f"torch is not installed ({error})"
    names = ("torch.distributed.tensor.experimental._context_parallel._load_balancer",
             "torch.distributed.tensor.experimental._load_balancer")
    import importlib
    for name in names:
        try:
            module = importlib.import_module(name)
        except Exception:  # an older torch lacks the module or fails to import it
            continue
        if hasattr(module, "_HeadTailLoadBalancer") and hasattr(module, "_PTRRLoadBalancer"):
            return module, None
    return None, (f"torch {torch.__version__} has no _HeadTailLoadBalancer/_PTRRLoadBalancer "
                  f"(looked in {', '.join(names)})")


class _BlockCountsView:
    """What _PTRRLoadBalancer reads of a BlockMask: the per-query-block counts
    of partial and full key blocks and the block size. Used where
    FlexAttention is not installed; on the GPU the real BlockMask is given."""

    def __init__(self, partial, full, block):
        import torch
        self.kv_num_blocks = torch.as_tensor(partial, dtype=torch.int32).view(1, 1, -1)
        self.full_kv_num_blocks = torch.as_tensor(full, dtype=torch.int32).view(1, 1, -1)
        self.BLOCK_SIZE = (block, block)


def _rows_from_order(order, tokens, cp):
    order = np.asarray(order, dtype=np.int64).reshape(-1)
    if order.size != tokens or np.any(np.sort(order) != np.arange(tokens)):
        raise Undefined(f"its indices are not a permutation of the row's {tokens} positions "
                        f"({order.size} indices, max {int(order.max()) if order.size else -1})")
    if tokens % cp:
        raise Undefined(f"N = {tokens} does not split into {cp} equal shards")
    return order.reshape(cp, tokens // cp)


def torch_plan(strategy, doc_lengths, cp, mask, block, block_mask_factory=None):
    """PyTorch's balancer on the row: positions (P, N / P). block_mask_factory,
    when given, returns the row's real BlockMask (B = H = 1, N x N) for PTRR."""
    module, why = torch_balancers()
    if module is None:
        raise Undefined(why)
    tokens = int(np.sum(doc_lengths))
    try:
        if strategy == "torch_head_tail":
            balancer = module._HeadTailLoadBalancer(tokens, cp, "cpu")
        elif strategy == "torch_ptrr":
            if block_mask_factory is not None:
                block_mask = block_mask_factory()
            else:
                counts = block_counts(np.arange(tokens), doc_lengths, mask, block)
                nonempty, full = block_structure(counts, block)
                block_mask = _BlockCountsView((nonempty & ~full).sum(axis=1), full.sum(axis=1),
                                              block)
            balancer = module._PTRRLoadBalancer(block_mask, cp)
        else:
            raise ValueError(f"unknown PyTorch strategy {strategy!r}")
        order = balancer._generate_indices(restore=False)
    except Undefined:
        raise
    except Exception as error:  # PyTorch's own refusals: AssertionError, NotImplementedError
        text = str(error).strip() or type(error).__name__
        raise Undefined(f"PyTorch's balancer refused N = {tokens}, P = {cp}: {text}") from None
    return _rows_from_order(order.cpu().numpy(), tokens, cp)


def plan(strategy, doc_lengths, cp, mask, block, cli, block_mask_factory=None):
    """(positions, info): info has the strategy used and the fallback reason."""
    if strategy in TORCH_STRATEGIES:
        positions = torch_plan(strategy, doc_lengths, cp, mask, block, block_mask_factory)
        return positions, {"used": strategy, "fallback_reason": None, "padding": 0}
    positions, answer = fulcrum_plan(cli, doc_lengths, cp, strategy, mask, block)
    return positions, {"used": answer["used"], "fallback_reason": answer["fallback_reason"],
                       "padding": answer["padding"],
                       "cli_tiles": [rank["tiles"] for rank in answer["ranks"]],
                       "cli_pairs": [rank["pairs"] for rank in answer["ranks"]]}


def check_permutation(positions, tokens):
    """Every position of the row exactly once, pads aside."""
    real = positions[positions != PAD]
    return real.size == tokens and np.array_equal(np.sort(real), np.arange(tokens))
