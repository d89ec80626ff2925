#!/usr/bin/env python3
"""Does overlapping the K/V exchange with compute pay in hybrid mode
(docs/HYBRID_RUNTIME.md section 10)? Trains configs/hybrid.yaml with
parallel.hybrid.overlap on and off, alternating, R times each per world size
(repetition r runs on then off when r is even, off then on when odd, so
neither side always runs first), from the same seed: the same batches and the
same schedules (the profile is fixed). Per job it takes the median of the
measured step times (`measured_step_ms`) after a warm-up step; per world size
and side it prints the median over the repetitions with the min..max spread,
the off/on ratio of each adjacent pair with its spread, and the exchange
time compute hid ((exchange - wait) / exchange, summed over ranks and steps).
"On" calls the kernel as --overlap-calls says (parallel.hybrid.overlap_calls,
two_a_pass by default; the section's first tables ran a call per peer).

Run from the repository root after a release build:

    python3 benchmarks/hybrid_overlap.py                          # W = 4 and 6, R = 3
    python3 benchmarks/hybrid_overlap.py --worlds 4 --repetitions 5 --steps 4
    python3 benchmarks/hybrid_overlap.py --batch 4     # a quarter of the work per step
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(fulcrum, world, steps, batch, overlap, metrics, calls):
    tokens = -(-4096 // world)  # T: a 4096-token document fits the world
    argv = [fulcrum, "train", "--config", "configs/hybrid.yaml",
            "--set", f"train.steps={steps}", "--set", f"data.global_batch_size={batch}", "--set", f"parallel.world_size={world}",
            "--set", f"parallel.max_tokens_per_rank={tokens}", "--set", "train.threads=1",
            "--set", f"parallel.hybrid.overlap={'true' if overlap else 'false'}",
            *(["--set", f"parallel.hybrid.overlap_calls={calls}"] if overlap else []),
            "--metrics", metrics]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    steps_ms, exchange, wait, prints = [], 0.0, 0.0, []
    with open(metrics) as f:
        for line in f:
            j = json.loads(line)
            if "scheduler" not in j or "ranks" not in j:
                continue
            prints.append(j.get("schedule_fingerprint"))
            if j["step"] == 1:
                continue  # the warm-up: allocator and caches
            steps_ms.append(j["measured_step_ms"])
            exchange += sum(r["exchange_ms"] for r in j["ranks"])
            wait += sum(r["exchange_wait_ms"] for r in j["ranks"])
    return statistics.median(steps_ms), exchange, wait, prints


def spread(values):
    return f"{statistics.median(values):8.1f} ({min(values):.1f}..{max(values):.1f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fulcrum", default="build/release/bin/fulcrum")
    parser.add_argument("--worlds", default="4,6")
    parser.add_argument("--steps", type=int, default=3, help="per job, the first a warm-up")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16,
                        help="data.global_batch_size (configs/hybrid.yaml: 16)")
    parser.add_argument("--overlap-calls", default="two_a_pass", choices=["two_a_pass", "per_peer"],
                        help="parallel.hybrid.overlap_calls of the 'on' side")
    args = parser.parse_args()
    if not os.path.isfile(args.fulcrum):
        sys.exit(f"hybrid_overlap: {args.fulcrum} does not exist; build first "
                 "(cmake --build --preset release) or pass --fulcrum")
    if args.steps < 2 or args.repetitions < 1:
        sys.exit("hybrid_overlap: --steps must be >= 2 (one warm-up) and --repetitions >= 1")
    print(f"configs/hybrid.yaml, global batch {args.batch}, "
          f"{args.steps} steps per job (the first a warm-up), "
          f"train.threads 1, R = {args.repetitions}; measured_step_ms, median per job")
    with tempfile.TemporaryDirectory() as tmp:
        for world in [int(w) for w in args.worlds.split(",")]:
            step = {True: [], False: []}
            hidden = {True: [0.0, 0.0], False: [0.0, 0.0]}
            prints = set()
            for rep in range(args.repetitions):
                for overlap in ((True, False) if rep % 2 == 0 else (False, True)):
                    metrics = os.path.join(tmp, f"w{world}_{rep}_{overlap}.jsonl")
                    ms, exchange, wait, fp = run(args.fulcrum, world, args.steps, args.batch,
                                                 overlap, metrics, args.overlap_calls)
                    step[overlap].append(ms)
                    hidden[overlap][0] += exchange
                    hidden[overlap][1] += wait
                    prints.add(tuple(fp))
                    print(f"  W = {world} rep {rep} overlap {'on ' if overlap else 'off'}"
                          f"  step {ms:8.1f} ms", flush=True)
            ratios = [off / on for on, off in zip(step[True], step[False])]
            exchange, wait = hidden[True]
            share = f"{(exchange - wait) / exchange:.1%}" if exchange > 0 else "-"
            print(f"W = {world}: overlap on {spread(step[True])} ms, off {spread(step[False])} "
                  f"ms; off / on by pair {statistics.median(ratios):.3f} "
                  f"({min(ratios):.3f}..{max(ratios):.3f}); hidden with overlap {share}; "
                  f"{'the same schedules in every job' if len(prints) == 1 else 'SCHEDULES DIFFER'}")


if __name__ == "__main__":
    main()
