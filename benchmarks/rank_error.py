#!/usr/bin/env python3
"""What is the per-rank prediction error made of, and which fit lowers it?
Held-out evidence from the trainer's own records (docs/HYBRID_RUNTIME.md
section 12, issue 21's per-rank measure).

Reads the same records as benchmarks/reprice_fit.py (a job trained with
`--compare-schedulers`: each measured step's `fit_samples` and each compared
schedule's `slot_ranks` and `waves`) and, for each candidate way of fitting
the cost model's terms (the row model: a tiles + b tokens + c + r N +
d bytes + e peers), prices held-out steps two ways:

- leave one step out: fit on every other step, price the left-out one;
- forward (`fwdN`), as `profile: auto` does: each step priced by the fit
  of the previous N steps of the same job (fwd2 is auto's window with
  refit_every 1; the first usable step is only fitted on).

Per candidate it prints, per scheduler, the held-out per-rank median |error|
of (measured - predicted) / predicted of a rank's summed member times; the
same with each held-out step's common factor removed (the median measured /
predicted over the step's (scheduler, rank) figures: what a fit cannot know
before the step runs); and the held-out speed-ups of hybrid over fixed and
over megatron_dcp (critical paths replayed as reprice_fit.py does), with and
without the slot-end wait j x slowest member x e(g') fitted from slot
lengths. For the base candidate it also splits each rank's error by slot
kind (the group size g of the slot the member ran in) and reports how a
rank's error goes with the share of its predicted time in each term.
Where two jobs ran the same batches, the per-rank difference between the
two runs of the same schedule is the noise floor. It also prints the job's
own per-rank figure (the median over repetitions of a rank's total) beside
the same predictions against the sum of the rank's member medians, and that
figure forward with the member fit scaled by the one factor between the
two filters, fitted on the window's steps.

    python3 benchmarks/rank_error.py build/hbq_w4/w4.jsonl [more.jsonl ...]

Candidates: `member` (fulcrum calibrate's and profile auto's fit: plain
least squares on member times); `member_rel` (least squares on relative
errors, weights 1 / measured); `rank_sum` (least squares on the per-(step,
scheduler, rank) sums of the terms against the rank's summed time);
`rank_sum_rel` (the same on relative errors); `g_const` (the row model with
the constant c replaced by one constant per group size g). The slot-end
wait's j is fitted on slot lengths (reprice_fit.py's jitter, max form) or,
with --wait paths, on the training steps' critical paths.
"""

import argparse
import importlib.util
import json
import math
import os
import statistics
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("reprice_fit",
                                               os.path.join(_HERE, "reprice_fit.py"))
rf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rf)

SCHEDULERS = rf.SCHEDULERS
TERMS = rf.MODELS["row"]
SHARE_TERMS = {"tiles": ["tiles"], "tokens": ["tokens"], "row": ["row"],
               "exchange": ["kv", "peers"], "constant": ["one"]}


def members_of(steps):
    return [m for step in steps for s in step.values() for m in s["members"]]


def rank_rows(steps, terms):
    """Per (step, scheduler, rank): the sums of each term's count and of the
    measured seconds."""
    rows = []
    for step in steps:
        for sched in step.values():
            by_rank = {}
            for m in sched["members"]:
                row = by_rank.setdefault(m["rank"], dict.fromkeys(terms + ["seconds"], 0.0))
                for t in terms + ["seconds"]:
                    row[t] += m[t]
            rows += list(by_rank.values())
    return rows


def fit_weighted(rows, terms, relative):
    """reprice_fit's fit of seconds on the terms, each row weighted by
    1 / seconds when `relative`."""
    return rf.fit(rows, terms, [1.0 / r["seconds"] for r in rows] if relative else None)


def with_g_columns(steps, gs):
    for m in members_of(steps):
        for g in gs:
            m[f"g{g}"] = 1.0 if m["g"] == g else 0.0


def fit_candidate(name, train):
    if name == "member":
        return fit_weighted(members_of(train), TERMS, False)
    if name == "member_rel":
        return fit_weighted(members_of(train), TERMS, True)
    if name == "rank_sum":
        return fit_weighted(rank_rows(train, TERMS), TERMS, False)
    if name == "rank_sum_rel":
        return fit_weighted(rank_rows(train, TERMS), TERMS, True)
    if name == "g_const":
        gs = sorted({m["g"] for m in members_of(train)})
        terms = [t for t in TERMS if t != "one"] + [f"g{g}" for g in gs]
        return fit_weighted(members_of(train), terms, False)
    sys.exit(f"unknown candidate {name}")


def price(m, coef):
    return sum(c * m.get(t, 0.0) for t, c in coef.items())


def rank_figures(step, coef):
    """Per scheduler: [(rank, measured, predicted, {g: residual})]."""
    out = {}
    for n, sched in step.items():
        ranks = {}
        for m in sched["members"]:
            r = ranks.setdefault(m["rank"], [0.0, 0.0, {}, dict.fromkeys(SHARE_TERMS, 0.0)])
            p = price(m, coef)
            r[0] += m["seconds"]
            r[1] += p
            r[2][m["g"]] = r[2].get(m["g"], 0.0) + m["seconds"] - p
            for kind, ts in SHARE_TERMS.items():
                r[3][kind] += sum(coef.get(t, 0.0) * m[t] for t in ts)
        out[n] = [(k, v[0], v[1], v[2], v[3]) for k, v in sorted(ranks.items())]
    return out


def critical_paths(step, coef, j):
    """Per scheduler: (measured, predicted, predicted with the slot-end wait)."""
    out = {}
    for n, sched in step.items():
        measured, predicted, extra = {}, {}, {}
        for m in sched["members"]:
            measured[(m["slot"], m["rank"])] = m["seconds"]
            predicted[(m["slot"], m["rank"])] = price(m, coef)
        for s, ms in rf.slot_members(sched).items():
            extra[s] = j * rf.jitter_wait(ms, coef, "max")
        out[n] = (rf.critical_path(sched["slots"], measured),
                  rf.critical_path(sched["slots"], predicted),
                  rf.critical_path(sched["slots"], predicted, extra=extra))
    return out


def fit_wait(train, coef):
    """j >= 0 through 0 on the slot lengths (reprice_fit's fit_jitter, max form)."""
    return rf.fit_jitter(train, coef, "max")


def fit_wait_paths(train, coef):
    """j on the critical paths instead: the j of a grid (0 to 1 by 0.005)
    whose predicted critical paths best match the measured ones relative to
    each other (log ratio, each step's mean over the schedulers removed: a
    step's common speed is not the wait's)."""
    per_step = []
    for step in train:
        rows = []
        for sched in step.values():
            measured, predicted, waits = {}, {}, {}
            for m in sched["members"]:
                measured[(m["slot"], m["rank"])] = m["seconds"]
                predicted[(m["slot"], m["rank"])] = price(m, coef)
            for s, ms in rf.slot_members(sched).items():
                waits[s] = rf.jitter_wait(ms, coef, "max")
            rows.append((sched["slots"], predicted, waits,
                         rf.critical_path(sched["slots"], measured)))
        per_step.append(rows)

    def loss(j):
        total = 0.0
        for rows in per_step:
            logs = [math.log(cm / rf.critical_path(slots, pred, extra={
                s: j * w for s, w in waits.items()})) for slots, pred, waits, cm in rows]
            mean = statistics.fmean(logs)
            total += sum((x - mean) ** 2 for x in logs)
        return total

    return min((k * 0.005 for k in range(201)), key=loss)


WAIT_FITS = {"slots": fit_wait, "paths": fit_wait_paths}


def folds(steps, mode):
    """(train keys, test key) pairs: `loo` leaves one step out; `fwdN`
    prices each step of a job by the fit of its previous N steps (all of
    them when N is 0)."""
    keys = sorted(steps)
    if mode == "loo":
        return [([k for k in keys if k != held], held) for held in keys]
    window = int(mode[3:])
    out = []
    for i, k in enumerate(keys):
        before = [p for p in keys[:i] if p[0] == k[0]]
        if window:
            before = before[-window:]
        if before:
            out.append((before, k))
    return out


def evaluate(steps, name, mode, wait="slots"):
    res = {"rank": {n: [] for n in SCHEDULERS}, "factored": {n: [] for n in SCHEDULERS},
           "crit": {n: [0.0, 0.0, 0.0] for n in SCHEDULERS}, "j": [], "ranks": [],
           "factors": []}
    for train_keys, test_key in folds(steps, mode):
        train = [steps[k] for k in train_keys]
        coef = fit_candidate(name, train)
        j = WAIT_FITS[wait](train, coef)
        res["j"].append(j)
        figs = rank_figures(steps[test_key], coef)
        factor = statistics.median(m / p for rows in figs.values() for _, m, p, _, _ in rows)
        res["factors"].append(factor)
        for n, rows in figs.items():
            for rank, m, p, by_g, shares in rows:
                res["rank"][n].append((m - p) / p)
                res["factored"][n].append((m - factor * p) / (factor * p))
                res["ranks"].append((n, (m - p) / p, {g: v / p for g, v in by_g.items()},
                                     {k: v / p for k, v in shares.items()}))
        for n, cp in critical_paths(steps[test_key], coef, j).items():
            for i in range(3):
                res["crit"][n][i] += cp[i]
    return res


def median_abs(v):
    return statistics.median(abs(e) for e in v) if v else float("nan")


def report(name, mode, res):
    cells = [f"{n} {100 * median_abs(res['rank'][n]):.1f}% "
             f"(step factor out {100 * median_abs(res['factored'][n]):.1f}%)" for n in SCHEDULERS]
    allr = [e for n in SCHEDULERS for e in res["rank"][n]]
    within = sum(1 for e in allr if abs(e) <= 0.10)
    crit = res["crit"]
    gains = []
    for base in ("fixed", "megatron_dcp"):
        m = crit[base][0] / crit["hybrid"][0]
        p = crit[base][1] / crit["hybrid"][1]
        pj = crit[base][2] / crit["hybrid"][2]
        gains.append(f"over {base} measured {m:.3f}x, predicted {p:.3f}x ({100 * (m - p):+.1f}), "
                     f"with wait {pj:.3f}x ({100 * (m - pj):+.1f})")
    print(f"  {mode:8} {name:12} per-rank median |e|: {'; '.join(cells)}; "
          f"{within}/{len(allr)} ranks within 10%; step factors "
          f"{', '.join(f'{f:.3f}' for f in res['factors'])}; "
          f"j {', '.join(f'{j:.3f}' for j in res['j'])}")
    print(f"  {'':8} {'':12} hybrid {'; '.join(gains)}")
    return {"rank_median_abs": {n: median_abs(res["rank"][n]) for n in SCHEDULERS},
            "factored_median_abs": {n: median_abs(res["factored"][n]) for n in SCHEDULERS},
            "within_10": [within, len(allr)], "factors": res["factors"], "j": res["j"],
            "critical": crit}


def split(res):
    """The base fit's held-out rank errors split by slot kind and term share."""
    by_g = {}
    for _, _, parts, _ in res["ranks"]:
        for g, v in parts.items():
            by_g.setdefault(g, []).append(v)
    print("  each rank's error split by the group size of its slots (share of the rank's "
          "predicted time), median signed and median |.| over ranks: " + "; ".join(
              f"g={g}: {100 * statistics.median(v):+.1f}% / {100 * median_abs(v):.1f}% ({len(v)})"
              for g, v in sorted(by_g.items())))
    errs = [e for _, e, _, _ in res["ranks"]]
    cells = []
    for kind in SHARE_TERMS:
        xs = [s[kind] for _, _, _, s in res["ranks"]]
        cells.append(f"{kind} {100 * statistics.median(xs):.0f}% "
                     f"(r = {correlation(xs, errs):+.2f})")
    print("  share of a rank's predicted time per term, median, and its correlation with the "
          "rank's error: " + "; ".join(cells))


def correlation(x, y):
    mx, my = statistics.fmean(x), statistics.fmean(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else 0.0


def noise_floor(steps):
    """Per-rank |difference| of the same schedule's summed member times in
    two jobs on the same batches, relative to their mean."""
    by_step = {}
    for (path, step), scheds in steps.items():
        by_step.setdefault(step, []).append(scheds)
    diffs = []
    for runs in by_step.values():
        for a in range(len(runs)):
            for b in range(a + 1, len(runs)):
                for n in SCHEDULERS:
                    if n not in runs[a] or n not in runs[b]:
                        continue
                    if runs[a][n]["slots"] != runs[b][n]["slots"]:
                        continue
                    ta, tb = rank_totals(runs[a][n]), rank_totals(runs[b][n])
                    diffs += [abs(ta[r] - tb[r]) / ((ta[r] + tb[r]) / 2) for r in ta]
    return diffs


def rank_totals(sched):
    out = {}
    for m in sched["members"]:
        out[m["rank"]] = out.get(m["rank"], 0.0) + m["seconds"]
    return out


def filters(paths, steps):
    """The job's own per-rank figure (the median over repetitions of a
    rank's total, against the profile the step planned with) beside the
    same prediction against the sum of the rank's member medians: two
    filters of the same noisy runs. The steps the forward folds price: a
    job's first loaded step planned with the start profile."""
    job, summed = {n: [] for n in SCHEDULERS}, {n: [] for n in SCHEDULERS}
    for path in paths:
        first = min((k[1] for k in steps if k[0] == path), default=None)
        with open(path) as f:
            records = [json.loads(line) for line in f if line.strip()]
        for r in records:
            key = (path, r.get("step"))
            if ("compare" not in r or key not in steps or r["step"] == first
                    or r["compare"] not in steps[key]):
                continue
            totals = rank_totals(steps[key][r["compare"]])
            for rank, predicted in enumerate(r.get("predicted_rank_ms", [])):
                if predicted > 0 and rank in totals:
                    job[r["compare"]].append(r["prediction_error"][rank])
                    summed[r["compare"]].append((1e3 * totals[rank] - predicted) / predicted)
    if any(job.values()):
        print("the job's per-rank error (median over repetitions of the rank's total), and the "
              "same predictions against the sum of the rank's member medians, median |e|: "
              + "; ".join(f"{n} {100 * median_abs(job[n]):.1f}% and "
                          f"{100 * median_abs(summed[n]):.1f}%" for n in SCHEDULERS))
        gap = [(1 + a) / (1 + b) for n in SCHEDULERS for a, b in zip(job[n], summed[n])]
        print(f"the median of a rank's total over the sum of its member medians: median "
              f"{statistics.median(gap):.3f} ({min(gap):.3f} to {max(gap):.3f}, {len(gap)} ranks)")
    return job, summed


def job_medians(paths):
    """(path, step, scheduler) -> the job's per-rank medians of totals, s."""
    out = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                r = json.loads(line) if line.strip() else {}
                if "compare" in r and "rank_median_ms" in r:
                    out[(path, r["step"], r["compare"])] = [v / 1e3 for v in r["rank_median_ms"]]
    return out


def filter_scale(paths, steps, window=2):
    """Forward against the job's own filter: each step by the member fit of
    the previous `window` steps as it is, and scaled by the median over
    those steps' ranks of (the job's median of a rank's total) / (its
    predicted sum): a fit of the one factor between the fit's target (member
    medians) and the measure (the median of totals). Per scheduler the
    errors of both, and the scales."""
    medians = job_medians(paths)
    plain, scaled = {n: [] for n in SCHEDULERS}, {n: [] for n in SCHEDULERS}
    scales = []
    for train_keys, test_key in folds(steps, f"fwd{window}"):
        coef = fit_candidate("member", [steps[k] for k in train_keys])
        ratios = [medians[(k[0], k[1], n)][rank] / p
                  for k in train_keys for n, rows in rank_figures(steps[k], coef).items()
                  for rank, _, p, _, _ in rows if (k[0], k[1], n) in medians and p > 0]
        if not ratios:
            continue
        scale = statistics.median(ratios)
        scales.append(scale)
        for n, rows in rank_figures(steps[test_key], coef).items():
            key = (test_key[0], test_key[1], n)
            for rank, _, p, _, _ in rows:
                if key in medians and p > 0:
                    plain[n].append((medians[key][rank] - p) / p)
                    scaled[n].append((medians[key][rank] - scale * p) / (scale * p))
    return plain, scaled, scales


def report_filter_scale(paths, steps):
    plain, scaled, scales = filter_scale(paths, steps)
    if not scales:
        return
    cells = []
    for name, v in (("as fitted", plain), ("scaled", scaled)):
        within = sum(1 for e in v.values() for x in e if abs(x) <= 0.10)
        total = sum(len(e) for e in v.values())
        cells.append(f"{name} " + ", ".join(f"{n} {100 * median_abs(v[n]):.1f}%"
                                            for n in SCHEDULERS) + f" ({within}/{total})")
    print("against the job's median of totals, forward (fwd2), per-rank median |e|: "
          + "; ".join(cells) + "; scales (median of totals / predicted sum over the window) "
          + ", ".join(f"{x:.3f}" for x in scales))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("metrics", nargs="+")
    parser.add_argument("--first-step", type=int, default=2)
    parser.add_argument("--candidates", default="member,member_rel,rank_sum,rank_sum_rel,g_const")
    parser.add_argument("--wait", default="slots", choices=sorted(WAIT_FITS),
                        help="fit the slot-end wait's j on slot lengths or on critical paths")
    parser.add_argument("--modes", default="loo,fwd2",
                        help="loo, or fwdN: each step by the fit of the job's previous N "
                        "steps (0: all); profile auto fits the last 2 x refit_every")
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args()
    for mode in args.modes.split(","):
        if mode != "loo" and not (mode.startswith("fwd") and mode[3:].isdigit()):
            parser.error(f"--modes: {mode!r} is neither loo nor fwdN (N a whole number)")
    steps = rf.load(args.metrics, args.first_step)
    if len(steps) < 2:
        sys.exit("need at least two measured steps (one to fit, one to test)")
    with_g_columns(steps.values(), sorted({m["g"] for m in members_of(steps.values())}))
    print(f"{len(steps)} measured steps from {len(args.metrics)} file(s)")
    filters(args.metrics, steps)
    report_filter_scale(args.metrics, steps)
    diffs = noise_floor(steps)
    if diffs:
        print(f"noise floor: the same schedule on the same batches in two jobs, per-rank "
              f"|difference| / mean: median {100 * statistics.median(diffs):.1f}% "
              f"({len(diffs)} ranks, max {100 * max(diffs):.1f}%)")
    results = {}
    for mode in args.modes.split(","):
        for name in args.candidates.split(","):
            res = evaluate(steps, name, mode, args.wait)
            results[f"{mode} {name}"] = report(name, mode, res)
            if name == "member":
                split(res)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    rf.run_main(main, "rank_error.py")
