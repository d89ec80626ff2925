#!/usr/bin/env python3
"""Hybrid mode in the trainer, measured inside one job: the fixed,
megatron_dcp and hybrid schedulers' schedules of the same batches, run in
the same runtime, interleaved, from the same parameters
(`fulcrum train --compare-schedulers`, docs/HYBRID_RUNTIME.md section 9).

Run from the repository root after a release build:

    python3 benchmarks/hybrid_train.py            # W = 4, 6 and 8
    python3 benchmarks/hybrid_train.py --worlds 4 --steps 3

For each world size W it trains one hybrid job on long-tailed lengths
(../shared/workloads/dist_wlbllm.json, lengths / 8 for two CPU cores, when
present, else a seeded lognormal mix; the first line says which), with
train.threads 1 so that each rank's compute is its thread's CPU time, for
1 + --steps steps (step 1 warms the allocator up and is left out). In every
step each scheduler's schedule runs --repetitions times in rotating order
before the step is taken (with the configured scheduler, hybrid). Per
scheduler and W it reports, over the measured steps:

- the critical path replayed from the schedule's own timeline with the
  median (over repetitions) of every member's slot CPU time, summed over
  steps, and the same with wall times;
- the measured speedup over the planner's fixed and over megatron_dcp
  (ratio of the sums), with its spread: the min..max of the same ratio
  taken repetition by repetition;
- the cost model's predicted speedup;
- the per-rank prediction error (measured - predicted) / predicted of the
  median-filtered per (step, rank) time: its range and its median |error|;
  and the same with each measured step's common factor divided out (the
  median measured / predicted over the step's ranks of every scheduler:
  the whole step running faster or slower than predicted), with the
  factors;
- whether the predicted speedup lies within 5 points (0.05x) of the
  measured one;
- per scheduler, whether it is slower than the better baseline (fixed or
  megatron_dcp, the smaller summed critical path) beyond the spread: the
  better baseline's critical path / this scheduler's is below 1 in every
  repetition;
- the share of the exchange's own time that compute hid
  (`exchange_hidden_share` of the trained step's per-rank metrics, which
  ran hybrid's schedule): its median and range over (step, rank).

--profile picks the profile the hybrid scheduler plans with: a file or a
bundled name; `calibrate` first runs `fulcrum calibrate --config` on the
W's job (its own whole slots, --calibrate-steps steps) and plans with the
profile it writes; `auto` plans with balancer.schedule.profile: auto
(--profile-start, refit every --refit-every steps; docs/HYBRID_RUNTIME.md
section 10). --first-step leaves earlier steps out of the figures (with
`auto`, set it past the first refit).

Machine-readable results go to --out (default build/hybrid_train).
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time

MODEL = {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "vocab_size": 256}
SCHEDULERS = ["fixed", "megatron_dcp", "hybrid"]


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


def schedule_text(args, profile):
    if profile != "auto":
        return f"{{strategy: hybrid, profile: {profile}}}"
    start = f", profile_start: {args.profile_start}" if args.profile_start else ""
    return f"{{strategy: hybrid, profile: auto{start}, refit_every: {args.refit_every}}}"


def config_text(args, world, t, lengths_path, steps, profile):
    # Written out whatever its value, so that benchmarks/slot_bias.py tells
    # these records from those of before the key (a call per peer).
    return (f"parallel: {{mode: hybrid, world_size: {world}, max_tokens_per_rank: {t}, "
            f"hybrid: {{overlap_calls: {args.overlap_calls}}}}}\n"
            f"balancer:\n"
            f"  schedule: {schedule_text(args, profile)}\n"
            f"  cp: {{strategy: auto, block_size: 64, mask: causal}}\n"
            f"data: {{source: synthetic, path: {lengths_path}, seq_length: {world * t},\n"
            f"       packing: true, global_batch_size: 64, micro_batch_size: 1, seed: 1}}\n"
            f"model: {json.dumps(MODEL)}\n"
            f"train: {{steps: {steps}, dtype: float32, threads: 1, lr: 1.0e-3}}\n"
            f"dist: {{timeout_s: 120, op_timeout_s: 600}}\n")


class LoadSampler:
    """The 1-minute load average every 15 s while a W runs (calibration
    included): the machine is shared, and the figures move with its load."""

    def __init__(self):
        self.samples = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while True:
            try:
                with open("/proc/loadavg") as f:
                    self.samples.append(float(f.read().split()[0]))
            except (OSError, ValueError, IndexError):
                pass
            if self._stop.wait(15):
                return

    def __enter__(self):
        self.started = time.strftime("%H:%M", time.gmtime())
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.ended = time.strftime("%H:%M", time.gmtime())

    def summary(self):
        if not self.samples:
            return None
        return {"min": min(self.samples), "max": max(self.samples),
                "median": statistics.median(self.samples), "samples": len(self.samples),
                "utc": [self.started, self.ended]}


def train(args, world, lengths_path):
    name = f"w{world}"
    path = os.path.join(args.out, name + ".yaml")
    metrics = os.path.join(args.out, name + ".jsonl")
    if not (args.reuse and os.path.exists(metrics)):
        profile = args.profile
        if profile == "calibrate":
            profile = calibrate(args, world, lengths_path)
        with open(path, "w") as f:
            f.write(config_text(args, world, args.tokens_per_rank, lengths_path,
                                args.first_step - 1 + args.steps, profile))
        run = subprocess.run([args.fulcrum, "train", "--config", path, "--metrics", metrics,
                              "--compare-schedulers", ",".join(SCHEDULERS),
                              "--compare-repetitions", str(args.repetitions)],
                             capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"{name}: fulcrum train exited {run.returncode}:\n{run.stderr[-2000:]}")
    with open(metrics) as f:
        return [json.loads(line) for line in f if line.strip()]


def calibrate(args, world, lengths_path):
    """fulcrum calibrate --config on the W's job; the profile file's path."""
    path = os.path.join(args.out, f"w{world}_calibrate.yaml")
    profile = os.path.abspath(os.path.join(args.out, f"w{world}_profile.yaml"))
    with open(path, "w") as f:
        f.write(config_text(args, world, args.tokens_per_rank, lengths_path, 1, "cpu_gloo"))
    run = subprocess.run([args.fulcrum, "calibrate", "--config", path, "--output", profile,
                          "--force", "--steps", str(args.calibrate_steps),
                          "--repetitions", str(args.repetitions), "--set", "data.seed=2"],
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"w{world}: fulcrum calibrate exited {run.returncode}:\n{run.stderr[-2000:]}")
    print("\n".join(line for line in run.stderr.splitlines() if line.startswith("  ")))
    return profile


def speedup(base, other):
    """base / other of the summed critical paths, and the min..max of the
    same ratio repetition by repetition."""
    ratio = base["critical_ms"] / other["critical_ms"]
    per_rep = [b / o for b, o in zip(base["by_repetition"], other["by_repetition"]) if o > 0]
    return {"measured": ratio, "spread": [min(per_rep), max(per_rep)],
            "predicted": base["predicted_ms"] / other["predicted_ms"]}


def hidden_share(metrics, first_step):
    """exchange_hidden_share per (step, rank) of the trained steps; None when no
    figure is there (no rank exchanged, or metrics from before overlap)."""
    shares = [r["exchange_hidden_share"] for m in metrics
              if "ranks" in m and "compare" not in m and m.get("step", 0) >= first_step
              for r in m["ranks"] if r.get("exchange_hidden_share") is not None]
    if not shares:
        return None
    return {"median": statistics.median(shares), "range": [min(shares), max(shares)],
            "count": len(shares)}


def against_better_baseline(s):
    """Per scheduler: the better baseline's critical path / its own, with
    the spread by repetition, and whether it is slower beyond the spread."""
    better = min(("fixed", "megatron_dcp"), key=lambda n: s[n]["critical_ms"])
    out = {"better_baseline": better}
    for name in SCHEDULERS:
        v = speedup(s[better], s[name])
        v["slower_beyond_spread"] = v["spread"][1] < 1.0
        out[name] = v
    return out


def step_factors(metrics, first_step):
    """Per measured step its common factor (the median over every compared
    scheduler's ranks of median rank time / predicted) and, per scheduler,
    the per-rank error with it divided out: the part of the per-rank error
    a profile fitted before the step could still remove (the rest is the
    whole step running faster or slower; docs/HYBRID_RUNTIME.md section 12,
    "What the per-rank error is made of"). None without predictions."""
    by_step = {}
    for m in metrics:
        if "compare" in m and m["step"] >= first_step:
            for median, predicted in zip(m.get("rank_median_ms", []),
                                         m.get("predicted_rank_ms", [])):
                if predicted > 0:
                    by_step.setdefault(m["step"], []).append((m["compare"], median, predicted))
    if not by_step:
        return None
    factors, errors = {}, {name: [] for name in SCHEDULERS}
    for step, rows in sorted(by_step.items()):
        f = statistics.median(median / predicted for _, median, predicted in rows)
        factors[step] = f
        for name, median, predicted in rows:
            if name in errors and f > 0:
                errors[name].append(median / (f * predicted) - 1)
    return {"factors": factors,
            "error_median_abs": {n: statistics.median(abs(e) for e in v) if v else None
                                 for n, v in errors.items()}}


def summarise(metrics, first_step):
    records = [m for m in metrics if "compare" in m and m["step"] >= first_step]
    out = {}
    for name in SCHEDULERS:
        mine = [m for m in records if m["compare"] == name]
        if not mine:
            sys.exit(f"no comparison records of {name}: was the job trained with them?")
        reps = len(mine[0]["critical_path_ms_by_repetition"])
        errors = [e for m in mine for e in m["prediction_error"]]
        out[name] = {
            "steps": len(mine),
            "critical_ms": sum(m["critical_path_ms"] for m in mine),
            "wall_ms": sum(m["critical_path_wall_ms"] for m in mine),
            "max_rank_ms": sum(m["max_rank_ms"] for m in mine),
            "predicted_ms": sum(m["predicted_step_ms"] for m in mine),
            "by_repetition": [sum(m["critical_path_ms_by_repetition"][r] for m in mine)
                              for r in range(reps)],
            "error_range": [min(errors), max(errors)],
            "error_median_abs": statistics.median(abs(e) for e in errors),
            "groups": sorted({g for m in mine for g in m["groups"]}),
        }
    return out


def report_world(world, s):
    """Prints one W's figures."""
    print(f"\nW = {world}")
    if s["load_average"]:
        la = s["load_average"]
        print(f"  1-minute load average {la['min']:.1f} to {la['max']:.1f} (median "
              f"{la['median']:.1f}, {la['samples']} samples, {la['utc'][0]}-{la['utc'][1]} UTC)")
    print(f"  {'scheduler':13} {'critical path s':>15} {'wall s':>8} {'max rank s':>10} "
          f"{'predicted s':>11}  per-rank error (median |e|)  groups")
    for name in SCHEDULERS:
        r = s[name]
        print(f"  {name:13} {r['critical_ms'] / 1e3:15.3f} {r['wall_ms'] / 1e3:8.3f} "
              f"{r['max_rank_ms'] / 1e3:10.3f} {r['predicted_ms'] / 1e3:11.3f}  "
              f"{100 * r['error_range'][0]:+.1f}% to {100 * r['error_range'][1]:+.1f}% "
              f"({100 * r['error_median_abs']:.1f}%)  {r['groups']}")
    f = s["step_factors"]
    if f:
        print("  per-rank error with each step's common factor divided out (median |e|): "
              + ", ".join(f"{n} {100 * f['error_median_abs'][n]:.1f}%" for n in SCHEDULERS
                          if f["error_median_abs"][n] is not None)
              + "; the factors (median measured / predicted over the step's ranks): "
              + ", ".join(f"step {k} {v:.3f}" for k, v in f["factors"].items()))
    for key, label in (("hybrid_over_fixed", "fixed"),
                       ("hybrid_over_megatron_dcp", "megatron_dcp")):
        v = s[key]
        print(f"  hybrid over {label:13} measured {v['measured']:.3f}x "
              f"({v['spread'][0]:.3f}..{v['spread'][1]:.3f} by repetition), "
              f"predicted {v['predicted']:.3f}x, "
              f"{'within' if v['within_5_points'] else 'not within'} 5 points")
    b = s["against_better_baseline"]
    slower = [n for n in SCHEDULERS if b[n]["slower_beyond_spread"]]
    print(f"  better baseline {b['better_baseline']}; slower than it beyond the spread: "
          f"{', '.join(slower) if slower else 'none'}")
    for name in SCHEDULERS:
        if name != b["better_baseline"]:
            v = b[name]
            print(f"    {b['better_baseline']} / {name}: {v['measured']:.3f}x "
                  f"({v['spread'][0]:.3f}..{v['spread'][1]:.3f} by repetition)")
    h = s["exchange_hidden_share"]
    if h is None:
        print("  exchange hidden by overlap: no exchange_hidden_share figure in the measured steps")
    else:
        print(f"  exchange hidden by overlap (exchange_hidden_share, {h['count']} (step, rank)): "
              f"median {100 * h['median']:.1f}% ({100 * h['range'][0]:.1f}% to "
              f"{100 * h['range'][1]:.1f}%)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fulcrum", default="build/release/bin/fulcrum")
    parser.add_argument("--worlds", default="4,6,8")
    parser.add_argument("--tokens-per-rank", type=int, default=512)
    parser.add_argument("--steps", type=int, default=4, help="measured steps after the warm-up")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--profile", default=os.path.abspath("configs/profiles/cpu_calibrated.yaml"),
                        help="a profile file or bundled name, calibrate, or auto")
    parser.add_argument("--profile-start", default="", help="with --profile auto")
    parser.add_argument("--refit-every", type=int, default=4, help="with --profile auto")
    parser.add_argument("--calibrate-steps", type=int, default=3, help="with --profile calibrate")
    parser.add_argument("--first-step", type=int, default=2,
                        help="the first step measured; earlier ones are left out")
    parser.add_argument("--overlap-calls", default="two_a_pass", choices=["two_a_pass", "per_peer"],
                        help="parallel.hybrid.overlap_calls (docs/CONFIGS.md)")
    parser.add_argument("--out", default="build/hybrid_train")
    parser.add_argument("--reuse", action="store_true",
                        help="re-analyse the metrics of a previous run in --out without training")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    lengths, source = workload(1, 4000, 8)
    lengths_path = os.path.abspath(os.path.join(args.out, "lengths.json"))
    with open(lengths_path, "w") as f:
        json.dump(lengths, f)
    print(f"documents: {source}; {args.steps} measured steps, {args.repetitions} interleaved "
          f"runs of each schedule per step, profile {args.profile}")
    results = {"source": source, "profile": args.profile, "worlds": {}}
    for world in [int(w) for w in args.worlds.split(",")]:
        with LoadSampler() as load:
            metrics = train(args, world, lengths_path)
        s = summarise(metrics, args.first_step)
        s["load_average"] = None if args.reuse else load.summary()
        s["hybrid_over_fixed"] = speedup(s["fixed"], s["hybrid"])
        s["hybrid_over_megatron_dcp"] = speedup(s["megatron_dcp"], s["hybrid"])
        for key in ("hybrid_over_fixed", "hybrid_over_megatron_dcp"):
            v = s[key]
            v["within_5_points"] = abs(v["measured"] - v["predicted"]) <= 0.05
        s["against_better_baseline"] = against_better_baseline(s)
        s["exchange_hidden_share"] = hidden_share(metrics, args.first_step)
        s["step_factors"] = step_factors(metrics, args.first_step)
        results["worlds"][world] = s
        report_world(world, s)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
