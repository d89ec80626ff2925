#!/usr/bin/env python3
"""The K/V exchange hidden by overlap in hybrid mode (docs/HYBRID_RUNTIME.md
section 10): trains configs/hybrid.yaml for a few steps with
parallel.hybrid.overlap on and off and prints, per step, the exchanges' own
time summed over ranks (exchange_ms), what the ranks waited for it
(exchange_wait_ms), the hidden share (exchange - wait) / exchange, the
exchange time compute left exposed (comm_ms) and the measured step.

Run from the repository root after a release build:

    python3 benchmarks/hybrid_overlap.py                 # W = 4, 3 steps
    python3 benchmarks/hybrid_overlap.py --world 2 --steps 3
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile


def run(fulcrum, world, steps, overlap, metrics):
    tokens = -(-4096 // world)  # T: a 4096-token document fits the world
    argv = [fulcrum, "train", "--config", "configs/hybrid.yaml",
            "--set", f"train.steps={steps}", "--set", f"parallel.world_size={world}",
            "--set", f"parallel.max_tokens_per_rank={tokens}", "--set", "train.threads=1",
            "--set", f"parallel.hybrid.overlap={'true' if overlap else 'false'}",
            "--metrics", metrics]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    rows = []
    with open(metrics) as f:
        for line in f:
            j = json.loads(line)
            if "scheduler" not in j or "ranks" not in j:
                continue
            ranks = j["ranks"]
            rows.append((j["step"], sum(r["exchange_ms"] for r in ranks),
                         sum(r["exchange_wait_ms"] for r in ranks),
                         sum(r["comm_ms"] for r in ranks), j["measured_step_ms"]))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fulcrum", default="build/release/bin/fulcrum")
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    if not os.path.isfile(args.fulcrum):
        sys.exit(f"hybrid_overlap: {args.fulcrum} does not exist; build first "
                 "(cmake --build --preset release) or pass --fulcrum")
    print(f"W = {args.world}, configs/hybrid.yaml, {args.steps} steps, train.threads 1")
    print("overlap  step  exchange_ms  wait_ms  hidden  comm_ms  step_ms")
    with tempfile.TemporaryDirectory() as tmp:
        for overlap in (True, False):
            metrics = os.path.join(tmp, f"{overlap}.jsonl")
            for step, exchange, wait, comm, measured in run(args.fulcrum, args.world,
                                                              args.steps, overlap, metrics):
                hidden = f"{(exchange - wait) / exchange:6.1%}" if exchange > 0 else "     -"
                print(f"{'on' if overlap else 'off':7}  {step:4}  {exchange:11.1f}  {wait:7.1f}"
                      f"  {hidden}  {comm:7.1f}  {measured:7.1f}")


if __name__ == "__main__":
    main()
