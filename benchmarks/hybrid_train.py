#!/usr/bin/env python3
"""Hybrid mode in the trainer, measured: per-rank compute against the cost
model, hybrid's critical path against fixed mode's, K/V bytes against the
model and against fixed mode's all-gathers, and the bookkeeping share.

Run from the repository root after a release build:

    python3 benchmarks/hybrid_train.py            # W = 4, 6 and 8
    python3 benchmarks/hybrid_train.py --worlds 4 --steps 4

For each world size W it trains two jobs on the same long-tailed lengths
(../shared/workloads/dist_wlbllm.json, lengths / 8 for two CPU cores, when
present, else a seeded lognormal mix; the first line says which), with
train.threads 1 so that each rank's compute is its thread's CPU time, for
1 + 2 x --steps steps each (step 1 is warm-up and left out):

1. hybrid mode, its scheduler planning with configs/profiles/cpu_calibrated.yaml:
   every slot's CPU time, tiles, tokens and K/V bytes. A non-negative
   least-squares fit of cpu_ms = a * tiles + b * tokens + c + d * bytes over
   the first --steps steps gives the cost model's coefficients for this
   model on this machine (a, b, c, and its bandwidth as 1 / d: on CPU,
   moving K/V costs the rank the time to gather and place the rows); the
   last --steps steps, other batches, are predicted with them, rank by
   rank;
2. fixed mode, DP 1 x CP W on rows of W x T tokens, the same batches: each
   rank's compute CPU time per step, for the critical path.

Machine-readable results go to --out (default build/hybrid_train).
"""

import argparse
import json
import math
import os
import random
import subprocess
import sys

import numpy as np

MODEL = {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "vocab_size": 256}
DTYPE_BYTES = 4  # float32


def workload(seed, count, scale):
    here = os.path.join("..", "shared", "workloads", "dist_wlbllm.json")
    rng = random.Random(seed)
    if os.path.exists(here):
        with open(here) as f:
            pool = json.load(f)
        source = f"{here}, lengths / {scale}"
        lengths = [max(1, round(rng.choice(pool) / scale)) for _ in range(count)]
    else:
        source = "seeded lognormal mix (../shared/workloads absent)"
        lengths = [max(1, round(rng.lognormvariate(5.0, 1.2))) for _ in range(count)]
    return lengths, source


def config_text(world, t, lengths_path, steps, seed, mode, profile):
    parallel = (f"  mode: hybrid\n  world_size: {world}\n  max_tokens_per_rank: {t}\n"
                if mode == "hybrid" else f"  dp_size: 1\n  cp_size: {world}\n")
    schedule = (f"  schedule: {{strategy: hybrid, profile: {profile}}}\n"
                if mode == "hybrid" else "")
    return (f"parallel:\n{parallel}"
            f"balancer:\n{schedule}"
            f"  cp: {{strategy: auto, block_size: 64, mask: causal}}\n"
            f"data: {{source: synthetic, path: {lengths_path}, seq_length: {world * t},\n"
            f"       packing: true, global_batch_size: 64, micro_batch_size: 1, seed: {seed}}}\n"
            f"model: {json.dumps(MODEL)}\n"
            f"train: {{steps: {steps}, dtype: float32, threads: 1, lr: 1.0e-3}}\n"
            f"dist: {{timeout_s: 120, op_timeout_s: 600}}\n")


REUSE = False  # --reuse: read the jobs' metrics from --out instead of training


def train(fulcrum, out, name, text):
    path = os.path.join(out, name + ".yaml")
    metrics = os.path.join(out, name + ".jsonl")
    if REUSE and os.path.exists(metrics):
        with open(metrics) as f:
            return [json.loads(line) for line in f if line.strip()]
    with open(path, "w") as f:
        f.write(text)
    run = subprocess.run([fulcrum, "train", "--config", path, "--metrics", metrics],
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{name}: fulcrum train exited {run.returncode}:\n{run.stderr[-2000:]}")
    with open(metrics) as f:
        return [json.loads(line) for line in f if line.strip()]


def hybrid_lines(metrics):
    return [m for m in metrics if "scheduler" in m]


def step_lines(metrics):
    return [m for m in metrics if "loss" in m]


def slots(metrics, first, last):
    """The slots of steps first..last (step 1 warms the allocator and ATen
    up: no range includes it)."""
    for line in hybrid_lines(metrics):
        if not first <= line["step"] <= last:
            continue
        for rank in line["ranks"]:
            for s in rank["slots"]:
                yield line["step"], rank["rank"], s


def features(s):
    # The cost model's per-member quantities: tiles (of one layer), tokens,
    # one slot, and the K/V bytes it moves (received and sent, whose dK/dV
    # come back alike), which on CPU cost this rank's time to gather and
    # place.
    return [s["tiles"] / MODEL["num_layers"], s["tokens"], 1.0,
            s["predicted_kv_received"] + s["predicted_kv_sent"]]


def fit(metrics, first, last):
    rows, y = [], []
    for _, _, s in slots(metrics, first, last):
        rows.append(features(s))
        y.append(s["cpu_ms"])
    x, y = np.array(rows), np.array(y)
    # Non-negative least squares by trying every subset of the terms: the
    # best fit whose coefficients are all >= 0 (a cost cannot be negative).
    best, best_residual = [0.0] * x.shape[1], math.inf
    for mask in range(1, 1 << x.shape[1]):
        cols = [i for i in range(x.shape[1]) if mask >> i & 1]
        coef, *_ = np.linalg.lstsq(x[:, cols], y, rcond=None)
        if (coef < 0).any():
            continue
        residual = float(np.sum((x[:, cols] @ coef - y) ** 2))
        if residual < best_residual:
            best_residual = residual
            best = [0.0] * x.shape[1]
            for i, c in zip(cols, coef):
                best[i] = float(c)
    return best  # ms per tile, per token, per slot, per byte


def measure(fulcrum, out, world, t, steps):
    lengths, source = workload(7 + world, 8192, 8)
    lengths_path = os.path.abspath(os.path.join(out, f"lengths_w{world}.json"))
    with open(lengths_path, "w") as f:
        json.dump(lengths, f)
    # One hybrid job of 1 + 2 x steps steps: the coefficients are fitted on
    # steps 2 .. steps + 1 and predict steps + 2 .. 2 x steps + 1 (other
    # batches of the same job, so the shared machine's drift between jobs
    # does not enter). The scheduler plans with this machine's bundled
    # calibrated profile.
    total = 1 + 2 * steps
    profile = os.path.abspath("configs/profiles/cpu_calibrated.yaml")
    hybrid = train(fulcrum, out, f"w{world}_hybrid",
                   config_text(world, t, lengths_path, total, 1, "hybrid", profile))
    fixed = train(fulcrum, out, f"w{world}_fixed",
                  config_text(world, t, lengths_path, total, 1, "fixed", profile))
    a, b, c, d = fit(hybrid, 2, steps + 1)
    evaluated = (steps + 2, total)
    measured = [0.0] * world
    predicted = [0.0] * world
    kv_received = [0] * world
    kv_predicted = [0] * world
    for _, r, s in slots(hybrid, *evaluated):
        measured[r] += s["cpu_ms"]
        # The model's time for the member, with the fitted coefficients.
        predicted[r] += float(np.dot([a, b, c, d], features(s)))
        kv_received[r] += s["kv_received"]
        kv_predicted[r] += s["predicted_kv_received"]
    # Fixed mode's all-gathers: every rank receives the row but its shard.
    kv = 2 * MODEL["hidden_size"] * MODEL["num_layers"] * DTYPE_BYTES
    fixed_gather = 0
    for m in fixed:
        if "microbatch" in m and evaluated[0] <= m["step"] <= evaluated[1]:
            for n in m["tokens"]:
                shard = math.ceil(n / world)
                fixed_gather += world * (world * shard - shard) * kv  # all ranks
    def critical_path(metrics):
        return sum(max(s["rank_compute_cpu_ms"]) for s in step_lines(metrics)
                   if evaluated[0] <= s["step"] <= evaluated[1])

    hybrid_path, fixed_path = critical_path(hybrid), critical_path(fixed)
    overhead, overhead_wall = [], []
    for line, step in zip(hybrid_lines(hybrid), step_lines(hybrid)):
        if not evaluated[0] <= step["step"] <= evaluated[1]:
            continue
        for rank in line["ranks"]:
            setup = sum(s["setup_ms"] for s in rank["slots"])
            cpu = rank["compute_cpu_ms"]
            overhead.append((step["plan_ms"] + setup) / cpu if cpu > 0 else 0.0)
            overhead_wall.append((step["plan_ms"] + setup) / step["step_ms"])
    groups = sorted({g for line in hybrid_lines(hybrid) for g in line["groups"]})
    return {
        "world": world, "t": t, "steps": steps, "evaluated": evaluated, "source": source,
        "fit_ms": {"tile": a, "token": b, "slot": c, "byte": d},
        "rank_measured_ms": measured, "rank_predicted_ms": predicted,
        "kv_received": kv_received, "kv_predicted": kv_predicted,
        "fixed_allgather_bytes": fixed_gather,
        "hybrid_critical_path_ms": hybrid_path, "fixed_critical_path_ms": fixed_path,
        "overhead_median": float(np.median(overhead)) if overhead else 0.0,
        "overhead_max": max(overhead) if overhead else 0.0,
        "overhead_wall_median": float(np.median(overhead_wall)) if overhead_wall else 0.0,
        "overhead_wall_max": max(overhead_wall) if overhead_wall else 0.0,
        "groups": groups,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fulcrum", default="build/release/bin/fulcrum")
    parser.add_argument("--worlds", default="4,6,8")
    parser.add_argument("--tokens-per-rank", type=int, default=512)
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--out", default="build/hybrid_train")
    parser.add_argument("--reuse", action="store_true",
                        help="analyse the metrics already in --out instead of training")
    args = parser.parse_args()
    global REUSE
    REUSE = args.reuse
    os.makedirs(args.out, exist_ok=True)
    results = [measure(args.fulcrum, args.out, int(w), args.tokens_per_rank, args.steps)
               for w in args.worlds.split(",")]
    print(f"workload: {results[0]['source']}; model {MODEL}, float32, causal, B = 64, "
          f"global batch 64 documents, 1 + 2 x {args.steps} steps per job: step 1 warm-up, "
          f"the next {args.steps} fit, the last {args.steps} measured\n")
    for r in results:
        w = r["world"]
        f = r["fit_ms"]
        print(f"W = {w}, T = {r['t']}: slot groups {r['groups']}; fit (steps 2-{r['steps'] + 1}): "
              f"{f['tile'] * 1e3:.1f} us/tile + {f['token'] * 1e3:.2f} us/token + "
              f"{f['slot']:.2f} ms/slot + {f['byte'] * 1e6:.2f} ms/MB moved")
        print(f"steps {r['evaluated'][0]}-{r['evaluated'][1]}:")
        print("| rank | slot CPU s (measured) | model s | error | K/V received MiB | model MiB |")
        print("|---|---:|---:|---:|---:|---:|")
        for i in range(w):
            m, p = r["rank_measured_ms"][i], r["rank_predicted_ms"][i]
            print(f"| {i} | {m / 1e3:.2f} | {p / 1e3:.2f} | {100 * (p - m) / m:+.1f}% | "
                  f"{r['kv_received'][i] / 2**20:.2f} | {r['kv_predicted'][i] / 2**20:.2f} |")
        total = sum(r["kv_received"])
        print(f"K/V received equals the model on every rank: "
              f"{r['kv_received'] == r['kv_predicted']}; all ranks {total / 2**20:.1f} MiB against "
              f"fixed mode's all-gathers {r['fixed_allgather_bytes'] / 2**20:.1f} MiB "
              f"({total / max(1, r['fixed_allgather_bytes']):.2f}x)")
        print(f"critical path (sum over steps of the slowest rank's compute CPU): hybrid "
              f"{r['hybrid_critical_path_ms'] / 1e3:.2f} s, fixed DP 1 x CP {w} "
              f"{r['fixed_critical_path_ms'] / 1e3:.2f} s "
              f"({r['fixed_critical_path_ms'] / r['hybrid_critical_path_ms']:.2f}x)")
        print(f"bookkeeping (scheduling + slot setup) per rank and step: of its compute CPU "
              f"median {100 * r['overhead_median']:.2f}%, worst {100 * r['overhead_max']:.2f}%; "
              f"of the step's wall time median {100 * r['overhead_wall_median']:.2f}%, worst "
              f"{100 * r['overhead_wall_max']:.2f}%\n")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
