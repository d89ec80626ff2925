#!/usr/bin/env python3
"""How often Megatron-core's own dynamic-CP scheduler (fulcrum.megatron's
strategy="megatron_dcp", exact to Megatron-LM dev) plans a micro-batch whose
CP groups its runtime does not have (docs/INTEGRATION.md): a group whose size
has no communicator, or one that is not the aligned block its members find
when they look their group up by size; and how often it raises.

Batches: documents drawn with replacement (seeded) from the shared mixes in
../shared/workloads (run from the repository root; without them the script
says so and stops), until they hold --mb micro-batches' worth of tokens per
rank, each clipped to W x T (Megatron cannot split a sample) and padded to a
multiple of 2W, as Megatron's dataset pads samples with dynamic CP
(2 x dp x cp), before the scheduler sees it.

    python3 benchmarks/megatron_groups.py [--ranks 8,16,64,12,24] [--tokens 8192,16384]
        [--batches 20] [--mb 4] [--plugin build/release/lib/fulcrum/libfulcrum_balancer.so]
Prints a markdown table; needs no plugin. With --plugin, two more columns:
the documents the plugin's C++ megatron_dcp (given the raw lengths, which it
pads itself) places in another micro-batch or group than Megatron's
scheduler, and the batches where one of the two fails and the other not.
"""

import argparse
import json
import pathlib
import random
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from fulcrum import megatron  # noqa: E402


def placements_differ(schedule, groups):
    """Documents whose (micro-batch, ranks) differ between a plugin schedule
    and Megatron's sample_id_groups."""
    theirs = {}
    for wave, ranks_ids in enumerate(groups):
        for rank, ids in enumerate(ranks_ids):
            for sample in ids:
                theirs.setdefault(sample, (wave, []))[1].append(rank)
    ours = {}
    for slot in schedule.slots:
        for doc in slot.docs:
            ours[int(doc)] = (slot.wave, slot.group.tolist())
    return sum(ours.get(doc) != (wave, ranks) for doc, (wave, ranks) in theirs.items())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="8,16,64,12,24")
    parser.add_argument("--tokens", default="8192,16384")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--mb", type=int, default=4)
    parser.add_argument("--plugin", default=None)
    args = parser.parse_args()
    try:
        ranks = [int(x) for x in args.ranks.split(",")]
        tokens = [int(x) for x in args.tokens.split(",")]
    except ValueError:
        sys.exit("megatron_groups.py: --ranks and --tokens take comma-separated integers")
    if args.batches < 1 or args.mb < 1 or any(w < 2 or w > 4096 for w in ranks) \
            or any(t < 1 or t > 1 << 24 for t in tokens):
        sys.exit("megatron_groups.py: --batches, --mb >= 1, ranks in [2, 4096], tokens in "
                 "[1, 2^24]")
    folder = pathlib.Path("../shared/workloads")
    mixes = {}
    for name in ("dist_wlbllm", "dist_prolong"):
        path = folder / f"{name}.json"
        if path.is_file():
            mixes[name] = json.loads(path.read_text())
    if not mixes:
        sys.exit("megatron_groups.py: ../shared/workloads not found (run from the repository "
                 "root of a checkout beside shared/); nothing measured")
    balancer = None
    if args.plugin is not None:
        import fulcrum
        balancer = fulcrum.load(args.plugin)
    print(f"mixes from {folder.resolve()}: {', '.join(mixes)}\n")
    extra = (" documents placed otherwise by the plugin | batches failed by one only |"
             if balancer else "")
    print("| mix | W = DP x CP | T | batches | micro-batches | micro-batches with a group "
          "Megatron's runtime lacks | batches with one | batches Megatron's scheduler raises on |"
          + extra)
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
          + (" ---: | ---: |" if balancer else ""))
    for name, pool in mixes.items():
        for world in ranks:
            for budget in tokens:
                rng = random.Random(world * 1000003 + budget)
                micro = bad_micro = bad_batches = raised = moved = one_failed = 0
                for _ in range(args.batches):
                    lengths, total = [], 0
                    while total < args.mb * world * budget:
                        length = min(rng.choice(pool), world * budget)
                        lengths.append(length)
                        total += length
                    pairs = [(i, -(-n // (2 * world)) * 2 * world)
                             for i, n in enumerate(lengths)]
                    try:
                        groups = megatron.get_groups_and_subsamples(
                            pairs, max_seqlen_per_dp_cp_rank=budget, dp_size=world // 2,
                            cp_size=2, strategy="megatron_dcp")
                    except (AssertionError, IndexError):
                        groups = None
                        raised += 1
                    if balancer is not None:
                        plugin = balancer.schedule("megatron_dcp", world=world,
                                                   max_tokens_per_rank=budget,
                                                   doc_lengths=lengths, profile="h100_7b")
                        served = plugin.used == "megatron_dcp"
                        if served != (groups is not None):
                            one_failed += 1
                        elif served:
                            moved += placements_differ(plugin, groups)
                    if groups is None:
                        continue
                    bad_here = 0
                    for ranks_ids in groups:
                        r = 0
                        broken = False
                        while r < world:
                            first = ranks_ids[r][0]
                            members = [q for q in range(world) if first in ranks_ids[q]]
                            if not megatron.group_is_megatron_group(members, world):
                                broken = True
                            r = members[-1] + 1
                        micro += 1
                        bad_here += broken
                    bad_micro += bad_here
                    bad_batches += bad_here > 0
                print(f"| {name} | {world} | {budget} | {args.batches} | {micro} | {bad_micro} | "
                      f"{bad_batches} | {raised} |"
                      + (f" {moved} | {one_failed} |" if balancer else ""), flush=True)


if __name__ == "__main__":
    main()
