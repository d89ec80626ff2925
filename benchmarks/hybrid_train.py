#!/usr/bin/env python3
"""Hybrid mode in the trainer, measured: per-rank compute against the cost
model, hybrid's critical path against fixed mode's, K/V bytes against the
model and against fixed mode's all-gathers, and the bookkeeping share.

Run from the repository root after a release build:

    python3 benchmarks/hybrid_train.py            # W = 4 and 8
    python3 benchmarks/hybrid_train.py --worlds 4 --steps 4

For each world size W it trains three jobs on the same long-tailed lengths
(../shared/workloads/dist_wlbllm.json scaled down for two CPU cores when
present, else a seeded lognormal mix; the first line says which), with
train.threads 1 so that each rank's compute is its thread's CPU time:

1. calibration, hybrid mode, data.seed 1: every slot's CPU time, tiles and
   tokens; a least-squares fit of cpu_ms = a * tiles + b * tokens + c gives
   this model's cost coefficients on this machine;
2. evaluation, hybrid mode, data.seed 2 (other batches), its scheduler
   planning with the calibrated profile: each rank's measured slot CPU time
   against the model's a * tiles + b * tokens + c for its slots;
3. fixed mode, DP 1 x CP W on rows of W x T tokens, data.seed 2: the same
   batches, each rank's compute CPU time per step.

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
            f"       packing: true, global_batch_size: 32, micro_batch_size: 1, seed: {seed}}}\n"
            f"model: {json.dumps(MODEL)}\n"
            f"train: {{steps: {steps}, dtype: float32, threads: 1, lr: 1.0e-3}}\n"
            f"dist: {{timeout_s: 120, op_timeout_s: 600}}\n")


def train(fulcrum, out, name, text):
    path = os.path.join(out, name + ".yaml")
    with open(path, "w") as f:
        f.write(text)
    metrics = os.path.join(out, name + ".jsonl")
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


def slots(metrics):
    for line in hybrid_lines(metrics):
        for rank in line["ranks"]:
            for s in rank["slots"]:
                yield line["step"], rank["rank"], s


def fit(metrics):
    rows, y = [], []
    for _, _, s in slots(metrics):
        rows.append([s["tiles"] / MODEL["num_layers"], s["tokens"], 1.0])
        y.append(s["cpu_ms"])
    coef, *_ = np.linalg.lstsq(np.array(rows), np.array(y), rcond=None)
    return [max(0.0, float(c)) for c in coef]  # ms per tile, per token, per slot


def profile_yaml(path, a_ms, b_ms, c_ms, world):
    kv = 2 * MODEL["hidden_size"] * MODEL["num_layers"] * DTYPE_BYTES
    with open(path, "w") as f:
        f.write(f"name: calibrated_w{world}\n"
                f"tile_seconds: {max(a_ms, 1e-9) * 1e-3:.6e}\n"
                f"token_seconds: {max(b_ms, 1e-9) * 1e-3:.6e}\n"
                f"slot_seconds: {max(c_ms, 1e-9) * 1e-3:.6e}\n"
                f"kv_bytes_per_token: {kv}\n"
                "intra_node_bytes_per_second: 2.0e9\n"
                "inter_node_bytes_per_second: 2.0e9\n"
                "latency_seconds: 1.0e-4\n"
                f"ranks_per_node: {world}\n")


def measure(fulcrum, out, world, t, steps):
    lengths, source = workload(7 + world, 4096, 16)
    lengths_path = os.path.join(out, f"lengths_w{world}.json")
    with open(lengths_path, "w") as f:
        json.dump(lengths, f)
    calibration = train(fulcrum, out, f"w{world}_calibrate",
                        config_text(world, t, lengths_path, steps, 1, "hybrid", "cpu_gloo"))
    a, b, c = fit(calibration)
    profile = os.path.join(out, f"profile_w{world}.yaml")
    profile_yaml(profile, a, b, c, world)
    hybrid = train(fulcrum, out, f"w{world}_hybrid",
                   config_text(world, t, lengths_path, steps, 2, "hybrid", profile))
    fixed = train(fulcrum, out, f"w{world}_fixed",
                  config_text(world, t, lengths_path, steps, 2, "fixed", profile))

    measured = [0.0] * world
    predicted = [0.0] * world
    kv_received = [0] * world
    kv_predicted = [0] * world
    for _, r, s in slots(hybrid):
        measured[r] += s["cpu_ms"]
        # The model's compute for the member, with the fitted coefficients.
        predicted[r] += a * s["tiles"] / MODEL["num_layers"] + b * s["tokens"] + c
        kv_received[r] += s["kv_received"]
        kv_predicted[r] += s["predicted_kv_received"]
    # Fixed mode's all-gathers: every rank receives the row but its shard.
    kv = 2 * MODEL["hidden_size"] * MODEL["num_layers"] * DTYPE_BYTES
    fixed_gather = 0
    for m in fixed:
        if "microbatch" in m:
            for n in m["tokens"]:
                shard = math.ceil(n / world)
                fixed_gather += (world * shard - shard) * kv
    hybrid_path = sum(max(s["rank_compute_cpu_ms"]) for s in step_lines(hybrid))
    fixed_path = sum(max(s["rank_compute_cpu_ms"]) for s in step_lines(fixed))
    overhead = []
    for line, step in zip(hybrid_lines(hybrid), step_lines(hybrid)):
        for rank in line["ranks"]:
            setup = sum(s["setup_ms"] for s in rank["slots"])
            cpu = rank["compute_cpu_ms"]
            overhead.append((step["plan_ms"] + setup) / cpu if cpu > 0 else 0.0)
    groups = sorted({g for line in hybrid_lines(hybrid) for g in line["groups"]})
    return {
        "world": world, "t": t, "steps": steps, "source": source,
        "fit_ms": {"tile": a, "token": b, "slot": c},
        "rank_measured_ms": measured, "rank_predicted_ms": predicted,
        "kv_received": kv_received, "kv_predicted": kv_predicted,
        "fixed_allgather_bytes": fixed_gather,
        "hybrid_critical_path_ms": hybrid_path, "fixed_critical_path_ms": fixed_path,
        "overhead_median": float(np.median(overhead)) if overhead else 0.0,
        "overhead_max": max(overhead) if overhead else 0.0,
        "groups": groups,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fulcrum", default="build/release/bin/fulcrum")
    parser.add_argument("--worlds", default="4,8")
    parser.add_argument("--tokens-per-rank", type=int, default=512)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", default="build/hybrid_train")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    results = [measure(args.fulcrum, args.out, int(w), args.tokens_per_rank, args.steps)
               for w in args.worlds.split(",")]
    print(f"workload: {results[0]['source']}; model {MODEL}, float32, causal, B = 64, "
          f"global batch 32 documents, {args.steps} steps per job\n")
    for r in results:
        w = r["world"]
        f = r["fit_ms"]
        print(f"W = {w}, T = {r['t']}: slot groups {r['groups']}; fit (calibration job): "
              f"{f['tile'] * 1e3:.1f} us/tile + {f['token'] * 1e3:.2f} us/token + "
              f"{f['slot']:.2f} ms/slot")
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
        print(f"bookkeeping (scheduling + slot setup) / compute CPU per rank and step: median "
              f"{100 * r['overhead_median']:.2f}%, worst {100 * r['overhead_max']:.2f}%\n")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
