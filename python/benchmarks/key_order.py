"""What the key order costs a FlexAttention rank: the busiest rank's
non-empty blocks over the ideal share, with keys in row order (K/V restored
after the all-gather) and in the all-gathered order PyTorch's FlexAttention CP
path hands the kernel, on packed rows of the shared workload mixes.

The rows are the first --rows rows of --tokens tokens packed (seeded shuffle,
documents cut where a row fills) from ../shared/workloads/dist_wlbllm.json and
dist_prolong.json. Also times fulcrum.block_mask.rank_block_mask for one rank
(median of --repeats calls).

    python3 python/benchmarks/key_order.py --plugin build/release/lib/fulcrum/libfulcrum_balancer.so
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

import numpy as np  # noqa: E402

import fulcrum  # noqa: E402
from fulcrum import work  # noqa: E402
from fulcrum.block_mask import rank_block_mask  # noqa: E402


def packed_rows(lengths, tokens, count, seed=0):
    order = np.random.default_rng(seed).permutation(len(lengths))
    rows, row, room = [], [], tokens
    for index in order:
        left = int(lengths[index])
        while left and len(rows) < count:
            take = min(left, room)
            row.append(take)
            left, room = left - take, room - take
            if room == 0:
                rows.append(row)
                row, room = [], tokens
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plugin", default=str(ROOT / "build/release/lib/fulcrum/"
                                                "libfulcrum_balancer.so"))
    parser.add_argument("--workloads", default=str(ROOT.parent / "shared" / "workloads"))
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--cp", type=int, default=8)
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    balancer = fulcrum.load(args.plugin, check_permissions=False)
    print(f"{args.rows} rows of {args.tokens} tokens per mix, P={args.cp}, B={args.block_size}; "
          "busiest rank's blocks / ideal (unsharded tiles / P), mean over rows")
    print(f"{'mix':<12} {'strategy':<20} {'row order':>9} {'gathered':>9}")
    for mix in ("dist_wlbllm", "dist_prolong"):
        lengths = json.loads(Path(args.workloads, f"{mix}.json").read_text())
        rows = packed_rows(lengths, args.tokens, args.rows)
        for strategy in ("per_document", "ptrr", "balanced"):
            ratios = {"row": [], "gathered": []}
            for docs in rows:
                plan = balancer.plan_cp(strategy, cp=args.cp, doc_lengths=docs,
                                        block_size=args.block_size)
                ideal = work.unsharded_tiles(args.tokens, docs, args.block_size, "causal") / args.cp
                for order in ratios:
                    tiles = max(rank_block_mask(plan, r, order).tiles for r in range(args.cp))
                    ratios[order].append(tiles / ideal)
            used = f"{strategy}" if plan.used == strategy else f"{strategy}->{plan.used}"
            print(f"{mix:<12} {used:<20} {statistics.mean(ratios['row']):>9.3f} "
                  f"{statistics.mean(ratios['gathered']):>9.3f}")
    docs = packed_rows(json.loads(Path(args.workloads, "dist_wlbllm.json").read_text()),
                       131072, 1)[0]
    plan = balancer.plan_cp("auto", cp=16, doc_lengths=docs, block_size=128)
    for order in ("row", "gathered"):
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            rank_block_mask(plan, 0, order)
            times.append(time.perf_counter() - start)
        print(f"rank_block_mask, 131072 tokens ({len(docs)} documents), P=16, B=128, "
              f"{order} order: median {statistics.median(times) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
