"""Tables from the harness's records: per-rank times, measured max/mean per
strategy, the tile model's prediction against the measurement, and the fit."""

import json
import math
import os

import numpy as np

from .model import (fit_phases, held_out_affine, pearson, profile_from_fits, profile_yaml,
                    proportional_predictions)


def _fmt(x, digits=3):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{digits}f}"


def summarise(records, undefined):
    """One entry per (row, mask, P, strategy, kernel): measured and tile
    imbalance, prediction errors; plus the fits and correlations."""
    timed = [r for r in records if r.get("fwd_ms") is not None]
    # The block-mask kernel (flex on the GPU, the dense math in quick mode)
    # is what the tile model describes; varlen is reported beside it.
    flex = [r for r in timed if r["kernel"] != "varlen"]
    proportional = proportional_predictions(timed)
    affine = held_out_affine(flex)
    index_of = {id(r): i for i, r in enumerate(timed)}
    flex_index = {id(r): i for i, r in enumerate(flex)}
    groups = {}
    for r in timed:
        groups.setdefault((r["row"], r["mask"], r["cp"], r["strategy"], r["kernel"]), []).append(r)
    entries = []
    for key, members in sorted(groups.items()):
        members.sort(key=lambda r: r["rank"])
        times = np.array([r["fwd_ms"] + r["bwd_ms"] for r in members])
        tiles = np.array([r["tiles"] for r in members], dtype=float)
        prop_err = [proportional[index_of[id(r)]] / t - 1 for r, t in zip(members, times)
                    if index_of[id(r)] in proportional]
        aff_err = [affine[flex_index[id(r)]] / t - 1 for r, t in zip(members, times)
                   if flex_index.get(id(r)) in affine]
        entries.append({
            "row": key[0], "mask": key[1], "cp": key[2], "strategy": key[3], "kernel": key[4],
            "used": members[0].get("used"),
            "rank_ms": [float(t) for t in times],
            "measured_max_over_mean": float(times.max() / times.mean()),
            "tiles_max_over_mean": float(tiles.max() / tiles.mean()) if tiles.mean() else None,
            "max_ms": float(times.max()),
            "proportional_max_abs_error": float(np.max(np.abs(prop_err))) if prop_err else None,
            "affine_max_abs_error": float(np.max(np.abs(aff_err))) if aff_err else None,
            "tiles_time_correlation": pearson(tiles, times),
        })
    fits = fit_phases(flex) if len(flex) >= 4 else None
    overall = {
        "ranks_timed": len(timed),
        "correlation_tiles_vs_time": pearson([r["tiles"] for r in flex],
                                             [r["fwd_ms"] + r["bwd_ms"] for r in flex]),
        "proportional_errors": [v / (timed[i]["fwd_ms"] + timed[i]["bwd_ms"]) - 1
                                for i, v in proportional.items()],
        "fits": fits,
    }
    errors = np.abs(np.array(overall["proportional_errors"])) if proportional else np.zeros(0)
    overall["proportional_median_abs_error"] = float(np.median(errors)) if errors.size else None
    overall["proportional_share_within_5pct"] = (float((errors <= 0.05).mean())
                                                 if errors.size else None)
    return {"groups": entries, "undefined": undefined, "overall": overall}


def markdown(summary, header_lines):
    lines = list(header_lines) + [""]
    lines += ["## Measured max/mean of fwd+bwd kernel time per strategy", "",
              "| row | mask | P | strategy | kernel | used | measured max/mean | tiles max/mean "
              "| busiest rank ms | tile-model max error (proportional) "
              "| (affine, held out) | corr(tiles, time) |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for g in summary["groups"]:
        lines.append(
            f"| {g['row']} | {g['mask']} | {g['cp']} | {g['strategy']} | {g['kernel']} "
            f"| {g['used']} | {_fmt(g['measured_max_over_mean'])} "
            f"| {_fmt(g['tiles_max_over_mean'])} | {_fmt(g['max_ms'], 2)} "
            f"| {_fmt(g['proportional_max_abs_error'])} | {_fmt(g['affine_max_abs_error'])} "
            f"| {_fmt(g['tiles_time_correlation'])} |")
    if summary["undefined"]:
        lines += ["", "## Undefined on these rows", "", "| row | mask | P | strategy | why |",
                  "| --- | --- | --- | --- | --- |"]
        for u in summary["undefined"]:
            lines.append(f"| {u['row']} | {u['mask']} | {u['cp']} | {u['strategy']} "
                         f"| {u['why']} |")
    lines += ["", "## Per-rank times (ms, fwd+bwd)", ""]
    for g in summary["groups"]:
        lines.append(f"- {g['row']} {g['mask']} P={g['cp']} {g['strategy']} ({g['kernel']}): "
                     + ", ".join(_fmt(t, 2) for t in g["rank_ms"]))
    o = summary["overall"]
    lines += ["", "## Tile model", "",
              f"- ranks timed: {o['ranks_timed']}",
              f"- correlation of tiles and fwd+bwd time, all block-mask kernel ranks: "
              f"{_fmt(o['correlation_tiles_vs_time'])}",
              f"- proportional tile model, median |error| per rank: "
              f"{_fmt(o['proportional_median_abs_error'])}; share of ranks within 5%: "
              f"{_fmt(o['proportional_share_within_5pct'])}"]
    if o["fits"]:
        for phase, f in o["fits"].items():
            lines.append(f"- {phase}: {f['tile_ms'] * 1e3:.4g} us/tile + "
                         f"{f['token_ms'] * 1e6:.4g} ns/token + {f['const_ms']:.4g} ms "
                         f"(R^2 {_fmt(f['r2'])}); split: full tile "
                         f"{f['full_tile_ms'] * 1e3:.4g} us, partial tile "
                         f"{f['partial_tile_ms'] * 1e3:.4g} us")
    return "\n".join(lines) + "\n"


def read_records(paths):
    """(runs, rank records, undefined, checks) from records.jsonl files; a
    run record describes the run that wrote the records after it."""
    runs, records, undefined, checks = [], [], [], []
    for path in paths:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                entry = json.loads(line)
                kind = entry.pop("record")
                {"run": runs, "rank": records, "undefined": undefined,
                 "check": checks}[kind].append(entry)
    return runs, records, undefined, checks


SHAPE_KEYS = ("quick", "device", "torch", "heads", "kv_heads", "head_dim", "block_size")


def write_outputs(out_dir, record_paths, notes, extra=None):
    """summary.md, summary.json and, when the fit has enough ranks,
    profile.yaml in out_dir from the records of one or more runs of the same
    shape (device, heads, head dim, B). Raises ValueError for runs that
    differ in shape: their times do not belong in one fit. `extra` goes into
    summary.json as it is."""
    runs, records, undefined, checks = read_records(record_paths)
    if not runs:
        raise ValueError(f"{', '.join(record_paths)}: no run record; not written by run.py")
    shape = {k: runs[0][k] for k in SHAPE_KEYS}
    for run in runs[1:]:
        other = {k: run[k] for k in SHAPE_KEYS}
        if other != shape:
            raise ValueError(f"runs differ in shape: {shape} and {other}; merge runs of one "
                             "device, heads, head dim and block size only")
    summary = {**report_summary(records, undefined, checks), **(extra or {}), "runs": runs}
    lines = list(runs[0]["header"]) + [f"- {note}" for note in notes]
    if len(runs) > 1:
        lines.append(f"- merged from {len(runs)} runs: {', '.join(record_paths)}")
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(markdown(summary, lines))
    fits = summary["overall"]["fits"]
    if not fits:
        return summary
    name = "cpu_quick_dense" if shape["quick"] else "gpu_flex_fitted"
    kv_bytes = 2 * shape["kv_heads"] * shape["head_dim"] * 2  # K and V, bf16, one layer
    profile = profile_from_fits(fits, name, kv_bytes)
    provenance = [
        f"Fitted by benchmarks/gpu from {summary['overall']['ranks_timed']} per-rank "
        f"{'dense CPU' if shape['quick'] else 'FlexAttention'} fwd+bwd times",
        f"on {shape['device'] or 'cpu'}, torch {shape['torch']}; {shape['heads']} q heads, "
        f"{shape['kv_heads']} kv heads, head dim {shape['head_dim']}, B = {shape['block_size']}, "
        "one attention layer.",
        "kv_bytes_per_token: K and V of one layer in bf16. Communication figures are not",
        "measured by this harness (0): take them from `fulcrum calibrate` or a network profile."]
    path = os.path.join(out_dir, "profile.yaml")
    with open(path + ".tmp", "w") as f:
        f.write(profile_yaml(profile, provenance))
    os.replace(path + ".tmp", path)
    return summary


def report_summary(records, undefined, checks):
    summary = summarise(records, undefined)
    summary["checks"] = checks
    return summary
