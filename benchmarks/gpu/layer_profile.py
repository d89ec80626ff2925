#!/usr/bin/env python3
"""Measures a model shape's tile_seconds and token_seconds on this GPU
(gpubench/layer.py says how) and sets them beside the bundled h100_7b and
h100_7b_fa3. Writes records.jsonl, summary.json and summary.md under --out,
and profile-BACKEND.yaml per attention backend: the two measured figures,
every other field h100_7b's (labelled so in its comments).

Default: the 7B shape of h100_7b (32 layers, hidden 4096, 32 query heads,
8 K/V heads of 128, MLP 14336, B = 128) in bf16. --quick runs the whole
pipeline on the CPU at a toy shape (what the tests run).
Usage: python3 benchmarks/gpu/layer_profile.py --out DIR [--quick] [--reps N]"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpubench import layer  # noqa: E402
from gpubench.model import profile_yaml  # noqa: E402

H100_7B_REST = {"slot_seconds": 2.0e-3, "kv_bytes_per_token": 131072.0,
                "intra_node_bytes_per_second": 3.6e11, "inter_node_bytes_per_second": 4.0e10,
                "latency_seconds": 1.0e-3, "ranks_per_node": 8}
QUICK_SHAPE = {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "head_dim": 16, "ffn": 128,
               "block": 16}


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true", help="CPU, toy shape, few points")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--budget-s", type=float, default=420.0,
                   help="start no new timing after this many seconds")
    args = p.parse_args(argv)
    if args.reps < 1 or args.warmup < 0 or not args.budget_s > 0:
        p.error("--reps must be >= 1, --warmup >= 0 and --budget-s > 0")
    # Checked before any timing: a run may take minutes of a GPU's time.
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as error:
        p.error(f"--out {args.out}: cannot make that folder ({error.strerror}); give a folder "
                "you may write")
    if not os.access(args.out, os.W_OK | os.X_OK):
        p.error(f"--out {args.out}: this user may not write there; give a folder you may write")
    return args


def series(quick, block):
    """(causal lengths, unmasked (queries, keys) pairs, linear token counts)."""
    if quick:
        return [64, 128, 192, 256], [(64, k) for k in (64, 128, 256)], [64, 128, 256]
    causal = [2048, 4096, 8192, 16384, 32768, 65536]
    unmasked = [(8192, k) for k in (8192, 16384, 32768, 65536)]
    linear = [2048, 4096, 8192, 16384, 32768]
    assert all(n % block == 0 for n in causal + linear)
    return causal, unmasked, linear


SHORT = (128, 256, 512, 1024)  # rows below the fits' range: their floor, apart


def short(job):
    """The job's record marked as a short row: left out of the fits."""
    return lambda: dict(job(), short=True)


def run(args, torch):
    device = "cpu" if args.quick else "cuda"
    shape = dict(QUICK_SHAPE if args.quick else layer.SHAPE_7B)
    dtype = torch.float32 if args.quick else torch.bfloat16
    timer = layer.Timer(torch, device, args.reps, args.warmup)
    causal, unmasked, linear = series(args.quick, shape["block"])
    found = layer.backends(torch)
    names = ["math"] if args.quick else [n for n in ("flash", "cudnn", "efficient") if n in found]

    def attention(name, queries, keys, causal_mask):
        return lambda: layer.time_attention(torch, timer, shape, name, found.get(name), queries,
                                            keys, causal_mask, dtype)
    jobs = [lambda t=t: layer.time_linear(torch, timer, shape, t, dtype) for t in linear]
    for name in names:
        jobs += [attention(name, n, n, True) for n in causal]
        jobs += [attention(name, q, k, False) for q, k in unmasked]
    if not args.quick:
        jobs += [lambda d=d: layer.time_packed(torch, timer, shape, 32768, d, dtype)
                 for d in (256, 512, 1024, 2048, 4096, 8192, 32768)]
        jobs += [short(lambda t=t: layer.time_linear(torch, timer, shape, t, dtype))
                 for t in SHORT]
        jobs += [short(attention(name, n, n, True)) for name in names if name != "efficient"
                 for n in SHORT]
    records, start, skipped = [], time.monotonic(), 0
    for job in jobs:
        if time.monotonic() - start > args.budget_s:
            skipped += 1
            continue
        records.append(job())
        print(json.dumps(records[-1]), flush=True)
    return shape, records, skipped


def markdown(summary, header):
    lines = [f"# {header}", "",
             "| part | fit (ms per layer) | points | largest error | per model |",
             "| --- | --- | ---: | ---: | --- |"]
    lin = summary["linear"]
    lines.append(f"| linear | {lin['slope_ms']:.4e} x tokens + {lin['const_ms']:.3f} | "
                 f"{lin['points']} | {lin['largest_error']:.1%} | "
                 f"token_seconds {summary['token_seconds']:.3e} |")
    for name, entry in summary["attention"].items():
        for kind in ("causal", "unmasked"):
            fit = entry[kind]
            lines.append(f"| {name}, {kind} | {fit['slope_ms']:.4e} x tiles + "
                         f"{fit['const_ms']:.3f} | {fit['points']} | {fit['largest_error']:.1%} | "
                         + (f"tile_seconds {entry['tile_seconds']:.3e}, rho {entry['rho']:.3e}, "
                            f"{entry['tflops']:.0f} TFLOP/s |" if kind == "causal" else "|"))
    if summary["packed"]:
        lines += ["", "Packed 32K rows of equal documents (varlen), time over the flash causal "
                  "slope x tiles:", ""]
        lines += [f"- documents of {p['doc']}: {p['ms']:.2f} ms, {p['over_tile_model']:.2f}x"
                  for p in summary["packed"]]
    if summary["short"]:
        lines += ["", "Short rows, per layer, against the fitted slope alone:", ""]
        lines += [f"- {e['kind']}, {e['tokens']} tokens: {e['ms']:.3f} ms, "
                  f"{e['beyond_slope_ms']:.3f} ms beyond slope x size" for e in summary["short"]]
    lines += ["", "Bundled, for comparison (HYBRID.md section 3):", ""]
    for name, fig in layer.ASSUMED.items():
        rho = fig["tile_seconds"] / (layer.SHAPE_7B["block"] * fig["token_seconds"])
        lines.append(f"- {name}: tile_seconds {fig['tile_seconds']:.2e}, token_seconds "
                     f"{fig['token_seconds']:.2e}, rho {rho:.3e}")
    return "\n".join(lines) + "\n"


def write(out, shape, records, skipped, torch):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "records.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    summary = layer.summarise(records, shape)
    summary["skipped_for_budget"] = skipped
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    header = f"{device}, torch {torch.__version__}, {when}, median of the timed repetitions"
    summary["device"] = header
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(markdown(summary, header))
    for name, entry in summary["attention"].items():
        profile = dict(H100_7B_REST, name=f"measured_{name}", tile_seconds=entry["tile_seconds"],
                       token_seconds=summary["token_seconds"])
        provenance = [f"python3 benchmarks/gpu/layer_profile.py on {header}",
                      f"tile_seconds: {name} attention, causal fit x {shape['layers']} layers; "
                      "token_seconds: the layer's norms and projections x "
                      f"{shape['layers']} layers",
                      "every other field is h100_7b's (docs/HYBRID.md section 3), not measured"]
        with open(os.path.join(out, f"profile-{name}.yaml"), "w") as f:
            f.write(profile_yaml(profile, provenance))
    return summary


def main(argv):
    args = parse(argv)
    try:
        import torch
    except ImportError:
        print("layer_profile: no torch; install python3-torch (CPU, --quick) or a CUDA PyTorch",
              file=sys.stderr)
        return 2
    if not args.quick and not torch.cuda.is_available():
        print("layer_profile: no CUDA device here; run it on a GPU machine, or pass --quick for "
              "the CPU pipeline at a toy shape", file=sys.stderr)
        return 2
    shape, records, skipped = run(args, torch)
    summary = write(args.out, shape, records, skipped, torch)
    print(markdown(summary, summary["device"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
