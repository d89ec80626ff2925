"""Per-call overhead of the Python package over the plugin's own plan_cp.

One packed row of 128K tokens at P=16, B=128, strategy auto; every figure is
the median of --repeats single calls, all in this one process:

  abi      the plugin's plan_cp + release_plan through ctypes, nothing copied
           (the C++ call as any host pays it, plus ctypes' call cost)
  package  Balancer.plan_cp: the same call, the copy into NumPy, the plan
           checked as the host checks it, restore, the unsharded tiles and
           the imbalances
  figures  as package, with the plugin's per-rank figures withheld so that
           the package counts pairs and tiles itself (NumPy work model)

    python3 python/benchmarks/overhead.py --plugin build/release/lib/fulcrum/libfulcrum_balancer.so
"""

import argparse
import ctypes
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import numpy as np  # noqa: E402

import fulcrum  # noqa: E402
from fulcrum import _abi, plot, work  # noqa: E402
import plugin_doubles  # noqa: E402


def median_us(call, repeats):
    """Median microseconds of one call, and minor page faults per call."""
    call()  # warm: first-touch of buffers, lazy imports
    times = []
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(repeats):
        start = time.perf_counter_ns()
        call()
        times.append((time.perf_counter_ns() - start) / 1000.0)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return statistics.median(times), faults / repeats


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plugin", default="fulcrum_balancer")
    parser.add_argument("--tokens", type=int, default=131072)
    parser.add_argument("--cp", type=int, default=16)
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=51)
    args = parser.parse_args()

    docs = np.asarray(plot.random_docs(args.tokens, args.seed), dtype=np.int64)
    balancer = fulcrum.load(args.plugin)
    table, instance = balancer._table, balancer._instance

    request = _abi.CpRequest()
    request.struct_size = ctypes.sizeof(request)
    request.cp_size = args.cp
    request.tokens = args.tokens
    request.block_size = args.block_size
    request.doc_lengths = docs.ctypes.data_as(_abi.c_int64_p)
    request.num_docs = docs.size
    request.mask_kind = _abi.MASK_CAUSAL
    name = args.strategy.encode()
    request.strategy = name

    def abi_call():
        plan = _abi.CpPlan()
        plan.struct_size = ctypes.sizeof(plan)
        if table.plan_cp(instance, ctypes.byref(request), ctypes.byref(plan)) != _abi.OK:
            raise SystemExit(ctypes.string_at(table.last_error(instance)).decode())
        table.release_plan(instance, ctypes.byref(plan))

    def package_call():
        # A training loop plans a new row each call: no cached unsharded tiles.
        work._unsharded_tiles_cached.cache_clear()
        balancer.plan_cp(args.strategy, cp=args.cp, doc_lengths=docs, block_size=args.block_size)

    abi = median_us(abi_call, args.repeats)
    package = median_us(package_call, args.repeats)

    balancer._table = plugin_doubles.altered_plans(table, plugin_doubles.without_figures)
    figures = median_us(package_call, args.repeats)
    balancer._table = table
    plan = balancer.plan_cp(args.strategy, cp=args.cp, doc_lengths=docs,
                            block_size=args.block_size)

    print(f"row: {args.tokens} tokens in {docs.size} documents, cp {args.cp}, block "
          f"{args.block_size}, {args.strategy} -> {plan.used}; median of {args.repeats} calls")
    for label, (us, faults), what in (
            ("abi", abi, "plugin plan_cp + release_plan via ctypes"),
            ("package", package, "Balancer.plan_cp"),
            ("figures", figures, "Balancer.plan_cp counting pairs and tiles in NumPy")):
        extra = "" if label == "abi" else f", {us - abi[0]:+.1f} us, {us / abi[0]:.2f}x abi"
        print(f"{label:8s} {us:9.1f} us  {faults:6.0f} page faults/call  {what}{extra}")


if __name__ == "__main__":
    main()
