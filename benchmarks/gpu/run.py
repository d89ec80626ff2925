#!/usr/bin/env python3
"""fulcrum's GPU benchmark: every strategy's per-rank FlexAttention (and, for
per-document strategies, FlashAttention varlen) fwd + bwd time against
PyTorch's own CP balancers, the tile model's prediction against the
measurement, and a cost profile fitted from the kernel times. One run does it
all, because GPU time is scarce:

  1. checks: the fulcrum CLI answers; every plan is a permutation; each
     rank's block structure has exactly the plan's tiles; one rank per
     strategy and mask against an unsharded float32 reference;
  2. timing: each rank's kernel by CUDA events, median after warm-up;
  3. tables (Markdown + JSON), records (JSON lines) and the profile YAML in
     --out.

--quick runs the same steps on the CPU on small rows, the dense masked math
standing in for the kernel (its times are not GPU figures): the tests use it.
Usage: python3 benchmarks/gpu/run.py --out DIR [--quick] [--cp 4,8,16] ...
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpubench import kernels, masks, plans, report, rows  # noqa: E402

REPO_ROOT = rows.REPO_ROOT


def fail(message):
    print(f"gpu benchmark: {message}", file=sys.stderr)
    sys.exit(2)


def int_list(text, flag, low):
    try:
        values = [int(x) for x in text.split(",") if x]
    except ValueError:
        fail(f"{flag} {text!r} is not a comma-separated list of integers; e.g. {flag} 4,8,16")
    if not values or min(values) < low:
        fail(f"{flag} {text!r}: every value must be at least {low}")
    return values


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="directory for records, tables and profile")
    p.add_argument("--quick", action="store_true",
                   help="CPU, small rows, dense reference kernel (for tests)")
    p.add_argument("--cp", default="4,8,16")
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--masks", default="causal,sliding:4096")
    p.add_argument("--strategies",
                   default=",".join(plans.TORCH_STRATEGIES + plans.FULCRUM_STRATEGIES))
    p.add_argument("--varlen-strategies", default="per_document",
                   help="strategies also timed with the varlen kernel (document-causal only)")
    p.add_argument("--rows", default="", help="comma-separated row names (default: all)")
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--budget-s", type=float, default=480.0,
                   help="stop starting new timings after this many seconds; tables cover "
                        "what was timed")
    p.add_argument("--cli", default=None, help="fulcrum CLI (default: build/release/bin/fulcrum)")
    p.add_argument("--plugin", default=None,
                   help="balancer plugin for python/fulcrum when the CLI cannot run (default: "
                        "build/release/lib/fulcrum/libfulcrum_balancer.so)")
    p.add_argument("--force", action="store_true", help="write into a non-empty --out")
    args = p.parse_args(argv)
    args.cp = int_list(args.cp, "--cp", 1)
    if args.block_size < 1:
        fail(f"--block-size {args.block_size} must be positive; e.g. --block-size 128")
    if args.heads < 1 or args.kv_heads < 1 or args.heads % args.kv_heads:
        fail(f"--heads {args.heads} must be a positive multiple of --kv-heads {args.kv_heads}")
    if args.reps < 1 or args.warmup < 0:
        fail(f"--reps {args.reps} must be >= 1 and --warmup {args.warmup} >= 0")
    try:
        args.masks = [masks.MaskSpec.parse(m) for m in args.masks.split(",") if m]
    except ValueError as error:
        fail(f"--masks: {error}")
    known = plans.TORCH_STRATEGIES + plans.FULCRUM_STRATEGIES
    args.strategies = [s for s in args.strategies.split(",") if s]
    args.varlen_strategies = [s for s in args.varlen_strategies.split(",") if s]
    for s in args.strategies + args.varlen_strategies:
        if s not in known:
            fail(f"strategy {s!r} is unknown; use {', '.join(known)}")
    return args


def quick_rows():
    """Small rows for the CPU: packed, a long document cut, and single
    causal rows with divisible and odd lengths."""
    lengths = rows.synthetic_lengths(7, 400)
    small = [max(1, x // 64) for x in lengths]
    return [rows.Row("quick_packed_1k", rows.pack_first_row(small, 1024), "synthetic (quick)"),
            rows.Row("quick_single_512", [512], "one document", "single"),
            rows.Row("quick_single_odd", [515], "one document", "single")]


class Recorder:
    def __init__(self, out):
        self.path = os.path.join(out, "records.jsonl")
        self.file = open(self.path, "a")

    def write(self, kind, **entry):
        self.file.write(json.dumps({"record": kind, **entry}) + "\n")
        self.file.flush()


def make_kernel(args, feats, device):
    """(name, rank runner) for timing: flex on the GPU, the dense masked
    math on the CPU in quick mode."""
    import torch
    if args.quick:
        def run_dense(positions, row, mask):
            allowed = torch.as_tensor(masks.dense_mask(positions, row.doc_lengths, mask))

            def call(q, k, v):
                return kernels.masked_attention(q, k, v, allowed)
            return call, torch.float32
        return "dense-cpu", run_dense
    flex = kernels.compiled_flex()

    def run_flex(positions, row, mask):
        counts = masks.block_counts(positions, row.doc_lengths, mask, args.block_size)
        block_mask = kernels.flex_block_mask(positions, row.doc_lengths, mask, args.block_size,
                                             counts, device)

        def call(q, k, v):
            return flex(q, k, v, block_mask=block_mask, enable_gqa=True)
        return call, torch.bfloat16
    return "flex", run_flex


def time_cpu(run, inputs, reps, warmup):
    """Median fwd and bwd milliseconds by the wall clock (quick mode only)."""
    import statistics
    out = run(*inputs)
    grad = out.detach().clone().normal_()
    fwd, bwd = [], []
    for i in range(warmup + reps):
        for t in inputs:
            t.grad = None
        start = time.perf_counter()
        out = run(*inputs)
        mid = time.perf_counter()
        out.backward(grad)
        end = time.perf_counter()
        if i >= warmup:
            fwd.append((mid - start) * 1e3)
            bwd.append((end - mid) * 1e3)
    return statistics.median(fwd), statistics.median(bwd)


def varlen_runner(positions, row, args, device):
    """The varlen kernel on one rank's layout as a (q, k, v) -> out callable
    in the block-mask kernel's shapes ((1, H, S, D) queries and output, the
    row's (1, Hkv, N, D) keys), pad rows zero; None when the rank has no
    query."""
    import torch
    entry = kernels.varlen_entry()
    slots, keys, cu_q, cu_k, max_q, max_k = kernels.varlen_layout(positions, row.doc_lengths)
    if slots.size == 0:
        return None
    slots_t = torch.as_tensor(slots, device=device)
    keys_t = torch.as_tensor(keys, device=device)
    cu_q_t = torch.as_tensor(cu_q, device=device, dtype=torch.int32)
    cu_k_t = torch.as_tensor(cu_k, device=device, dtype=torch.int32)
    group = args.heads // args.kv_heads

    def call(q, k, v):
        # The kernel takes as many KV heads as query heads here, so K and V
        # are gathered per run and expanded; that copy is in the time, as a
        # varlen user without native GQA would pay it.
        qs = q[0].transpose(0, 1)[slots_t]
        ks = k[0].transpose(0, 1)[keys_t].repeat_interleave(group, dim=1)
        vs = v[0].transpose(0, 1)[keys_t].repeat_interleave(group, dim=1)
        out = entry(qs, ks, vs, cu_q_t, cu_k_t, max_q, max_k)
        full = out.new_zeros(q.shape[2], q.shape[1], q.shape[3]).index_copy(0, slots_t, out)
        return full.transpose(0, 1).unsqueeze(0)
    return call


def planner(args):
    """(the CLI's path or a PackagePlanner, a line saying which). The CLI is
    preferred; where it cannot run (a machine without its shared libraries),
    the plugin through python/fulcrum plans the same rows."""
    cli = args.cli or plans.default_cli(REPO_ROOT)
    if os.access(cli, os.X_OK):
        done = subprocess.run([cli, "--version"], capture_output=True, text=True)
        if done.returncode == 0:
            return cli, f"{done.stdout.strip()}, plans from {cli}"
        why = f"{cli} does not run ({done.stderr.strip().splitlines()[-1:] or done.returncode})"
    else:
        why = f"{cli} is not executable"
    plugin = args.plugin or plans.default_plugin(REPO_ROOT)
    if args.cli is None and os.path.isfile(plugin):
        try:
            package = plans.PackagePlanner(REPO_ROOT, plugin)
        except Exception as error:  # the package's FulcrumError, or NumPy missing
            fail(f"{why}, and the plugin {plugin} cannot be loaded: {error}")
        return package, f"plans from {package.description} ({why})"
    fail(f"{why}; build it (cmake --build build/release --target fulcrum), pass --cli, or "
         "give the plugin with --plugin / FULCRUM_PLUGIN")


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    os.makedirs(args.out, exist_ok=True)
    if os.listdir(args.out) and not args.force:
        fail(f"--out {args.out} is not empty; give an empty directory or --force to add to it")
    feats = kernels.features()
    if feats["torch"] is None:
        fail(f"{sys.executable} has no torch; run with an interpreter that has PyTorch")
    if not args.quick and not (feats["cuda"] and feats["flex"]):
        fail(f"torch {feats['torch']} here has cuda={feats['cuda']} flex={feats['flex']}: the "
             "timed run needs a CUDA GPU and FlexAttention (PyTorch >= 2.5); --quick runs on CPU")
    device = "cpu" if args.quick else "cuda"
    cli, version = planner(args)

    if args.quick:
        row_list, row_source = quick_rows(), "quick synthetic rows"
    else:
        row_list, row_source = rows.load_rows()
    if args.rows:
        wanted = set(args.rows.split(","))
        row_list = [r for r in row_list if r.name in wanted]
        if not row_list:
            fail(f"--rows {args.rows!r} matches no row")
    _, torch_why = plans.torch_balancers()
    recorder = Recorder(args.out)
    header = [
        f"# GPU benchmark ({'quick, CPU: times are not GPU figures' if args.quick else 'timed'})",
        "",
        f"- device: {feats['device_name'] or platform.processor() or 'cpu'}; torch "
        f"{feats['torch']}; FlexAttention {feats['flex']}; varlen {feats['varlen']}",
        f"- PyTorch's balancers: {'imported' if torch_why is None else torch_why}",
        f"- fulcrum: {version}",
        f"- rows: {row_source}",
        f"- B = {args.block_size}; heads {args.heads} q / {args.kv_heads} kv, head dim "
        f"{args.head_dim}; median of {args.reps} after {args.warmup} warm-up",
        f"- command: python3 benchmarks/gpu/run.py {' '.join(argv or sys.argv[1:])}",
    ]
    recorder.write("run", header=header, quick=args.quick, device=feats["device_name"],
                   torch=feats["torch"], heads=args.heads, kv_heads=args.kv_heads,
                   head_dim=args.head_dim, block_size=args.block_size)
    kernel_name, kernel_for = make_kernel(args, feats, device)
    started = time.time()
    stopped_early = None
    undefined = []
    check_failures = []

    # 1. Correctness: one rank per strategy and mask, on a row small enough
    # for an unsharded float32 reference (the first row's first documents).
    check_row_tokens = 512 if args.quick else 8192
    base = row_list[0]
    check_docs = rows.pack_first_row(base.doc_lengths, min(check_row_tokens, base.tokens), seed=0)
    check_row = rows.Row("check", check_docs, base.source)
    cp_check = min(args.cp)
    for mask in args.masks:
        for strategy in args.strategies:
            try:
                positions, info = plans.plan(strategy, check_row.doc_lengths, cp_check, mask,
                                             args.block_size, cli)
            except plans.Undefined as why:
                recorder.write("check", strategy=strategy, mask=str(mask), status="undefined",
                               why=str(why))
                continue
            busiest = int(np.argmax([masks.rank_summary(p, check_row.doc_lengths, mask,
                                                        args.block_size)["tiles"]
                                     for p in positions]))
            run, dtype = kernel_for(positions[busiest], check_row, mask)
            errors = kernels.reference_check(
                positions[busiest], check_row.doc_lengths, mask, args.heads, args.kv_heads,
                args.head_dim, kernel=None if args.quick else run, device=device, dtype=dtype)
            tolerance = 1e-4 if args.quick else 3e-2
            ok = max(errors.values()) <= tolerance
            recorder.write("check", strategy=strategy, mask=str(mask), cp=cp_check,
                           rank=busiest, kernel=kernel_name, errors=errors,
                           tolerance=tolerance, status="ok" if ok else "FAILED")
            if not ok:
                check_failures.append(f"{strategy} {mask}: {errors}")
            if (strategy in args.varlen_strategies and mask.kind == "causal" and feats["varlen"]
                    and not args.quick):
                import torch
                varlen = varlen_runner(positions[busiest], check_row, args, device)
                errors = kernels.reference_check(
                    positions[busiest], check_row.doc_lengths, mask, args.heads, args.kv_heads,
                    args.head_dim, kernel=varlen, device=device, dtype=torch.bfloat16)
                ok = max(errors.values()) <= tolerance
                recorder.write("check", strategy=strategy, mask=str(mask), cp=cp_check,
                               rank=busiest, kernel="varlen", errors=errors,
                               tolerance=tolerance, status="ok" if ok else "FAILED")
                if not ok:
                    check_failures.append(f"{strategy} {mask} varlen: {errors}")

    # 2. Plans, block structure against the plan's tiles, timing.
    deadline = started + args.budget_s
    try:
        for row in row_list:
            for mask in args.masks:
                for cp in args.cp:
                    for strategy in args.strategies:
                        undefined += time_strategy(args, row, mask, cp, strategy, cli, feats,
                                                   kernel_name, kernel_for, device, recorder,
                                                   deadline)
    except BudgetSpent as spent:
        stopped_early = f"stopped at {spent} after --budget-s {args.budget_s}"

    recorder.file.close()
    notes = [f"incomplete: {stopped_early}"] if stopped_early else []
    notes.append("correctness (one rank per strategy and mask vs unsharded float32): " + (
        "all within tolerance" if not check_failures else "FAILED: " + "; ".join(check_failures)))
    report.write_outputs(args.out, [recorder.path], notes, {"stopped_early": stopped_early})
    if check_failures:
        print("gpu benchmark: correctness FAILED for " + "; ".join(check_failures),
              file=sys.stderr)
        return 1
    return 0


class BudgetSpent(Exception):
    """--budget-s ran out; the message names the group not timed."""


def time_strategy(args, row, mask, cp, strategy, cli, feats, kernel_name, kernel_for, device,
                  recorder, deadline):
    """Plans one (row, mask, P, strategy), checks its block structure
    against the plan's tiles and times every rank; returns the undefined
    entries (none or one)."""
    where = dict(row=row.name, mask=str(mask), cp=cp, strategy=strategy)
    try:
        positions, info = plans.plan(strategy, row.doc_lengths, cp, mask, args.block_size, cli)
    except plans.Undefined as why:
        recorder.write("undefined", **where, why=str(why))
        return [{**where, "why": str(why)}]
    if not plans.check_permutation(positions, row.tokens):
        fail(f"{strategy} on {row.name} P={cp}: the plan is not a permutation of the row")
    summaries = [masks.rank_summary(p, row.doc_lengths, mask, args.block_size)
                 for p in positions]
    if "cli_tiles" in info and [s["tiles"] for s in summaries] != info["cli_tiles"]:
        fail(f"{strategy} on {row.name} {mask} P={cp}: block structure has tiles "
             f"{[s['tiles'] for s in summaries]}, the plan says {info['cli_tiles']}")
    kernels_here = [kernel_name]
    if (strategy in args.varlen_strategies and mask.kind == "causal" and feats["varlen"]
            and not args.quick):
        kernels_here.append("varlen")
    for kernel in kernels_here:
        for rank, (pos, summary) in enumerate(zip(positions, summaries)):
            if time.time() > deadline:
                raise BudgetSpent(f"{row.name} {mask} P={cp} {strategy} ({kernel}) rank {rank}")
            fwd, bwd = time_rank(args, kernel, kernel_for, pos, row, mask, device)
            recorder.write("rank", **where, kernel=kernel, rank=rank, used=info["used"],
                           fwd_ms=fwd, bwd_ms=bwd, **summary)
    return []


def time_rank(args, kernel, kernel_for, positions, row, mask, device):
    import torch
    if kernel == "varlen":
        run = varlen_runner(positions, row, args, device)
        dtype = torch.bfloat16
    else:
        run, dtype = kernel_for(positions, row, mask)
    if run is None:
        return 0.0, 0.0
    inputs = kernels.make_inputs(len(positions), row.tokens, args.heads, args.kv_heads,
                                 args.head_dim, dtype, device)
    if args.quick:
        return time_cpu(run, inputs, args.reps, args.warmup)
    return kernels.time_fwd_bwd(run, inputs, args.reps, args.warmup)


if __name__ == "__main__":
    sys.exit(main())
