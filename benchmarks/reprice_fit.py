#!/usr/bin/env python3
"""Which cost term do whole schedules miss? Held-out evidence from the
trainer's own records (docs/HYBRID_RUNTIME.md section 12).

Reads the metrics of jobs trained with `--compare-schedulers` (for example
the `wN.jsonl` files that benchmarks/hybrid_train.py leaves in its --out
folder): every measured step's `fit_samples` (each slot member's counts and
its median time over the repetitions) and each compared scheduler's
`slot_ranks` and `waves`, which place every sample in its slot. For each
candidate model it fits the terms by the same non-negative least squares as
`fulcrum calibrate` (plain errors, a negative term dropped and the rest
refitted) on all steps but one, and prices the left-out step with them:

- per slot member: the median |error| and the median signed error by
  scheduler and by group size g (the residuals);
- per (step, scheduler, rank): (measured - predicted) / predicted of the
  rank's summed member times, issue 21's per-rank figure;
- per scheduler: the schedule's critical path replayed with predicted and
  with measured member times (slots in wave order, each lasting its slowest
  member), summed over the held-out steps, and the speedups of hybrid over
  fixed and over megatron_dcp, measured against predicted.

Models: `base` is the cost model of ABI 1.3 (a tiles + b tokens + c +
K/V bytes / bandwidth + latency x peers); `row` adds r x N, N the real
tokens of the member's slot's whole row (ABI 1.4's row_token_seconds);
`group` adds a per-member constant per member of the slot (g), the candidate
of a per-slot cost that grows with the group.

Every model is also tested with the wait on a slot's slowest member as a
term of the slot's end (issue 21's candidate `member_jitter` j >= 0): a
slot lasts max_m p_m + j x X x e(g'), p_m the members' predicted times, X
their mean (`jitter mean`) or their maximum (`jitter max`), g' the members
with tokens and e(g) the expected maximum of g independent standard normals
(E_NORMAL_MAX; e(1) = 0). j is fitted on the training steps' SLOT lengths
(measured slowest member minus predicted slowest member, plain least
squares through 0, held at 0 if negative), never on member times, and the
left-out step's slot lengths and critical paths are priced with it.

With `--noise 0.1,0.2`, each held-out schedule is also replayed with its
predicted member times made noisy: every member's time independently times
a mean-preserving lognormal factor exp(sigma z - sigma^2 / 2), z standard
normal, averaged over `--draws` replays (seeded: the same figures every run).
It asks whether the machine's noise alone, propagated through the timeline
(a slot waits on its slowest member, and a balanced schedule has many
near-critical chains), explains the measured critical paths and speed-ups.

    python3 benchmarks/reprice_fit.py build/hbm_w4/w4.jsonl [more.jsonl ...]

The pricing mirrors core/schedule.cpp's price_slot_counts for profiles
without overlap and with one bandwidth (what the fit makes); it is an
analysis of records, not a second cost model the planners use.
"""

import argparse
import json
import math
import random
import statistics
import sys

SCHEDULERS = ["fixed", "megatron_dcp", "hybrid"]
MODELS = {
    "base": ["tiles", "tokens", "one", "kv", "peers"],
    "row": ["tiles", "tokens", "one", "row", "kv", "peers"],
    "group": ["tiles", "tokens", "one", "g", "kv", "peers"],
}
# Dropped in this order when the normal equations are singular (as
# calibration_fit.cpp's fit_kept does); slot_bias.py's "multi" first: it is
# the constant where every member fitted has peers, and the peers term where
# every member with peers has one.
DROP_ORDER = ["multi", "peers", "kv", "row", "g", "tokens"]
# e(g): the expected maximum of g independent standard normal variables,
# E[max] = integral of x g phi(x) Phi(x)^(g - 1) dx, by quadrature (step
# 1e-3 over [-12, 12]); beyond the table, Blom's approximation
# Phi^-1((g - 0.375) / (g + 0.25)).
E_NORMAL_MAX = [0.0, 0.0, 0.564190, 0.846284, 1.029375, 1.162964, 1.267206, 1.352178,
                1.423600, 1.485013, 1.538753, 1.586436, 1.629228, 1.667990, 1.703382,
                1.735913, 1.765991]
JITTER_FORMS = ["mean", "max"]


def expected_max(g):
    if g < len(E_NORMAL_MAX):
        return E_NORMAL_MAX[g]
    return statistics.NormalDist().inv_cdf((g - 0.375) / (g + 0.25))


def load(paths, first_step):
    """Every measured step as {scheduler: {"slots": [(ranks, wave)],
    "members": [sample dict]}}, keyed by (path, step)."""
    steps = {}
    for path in paths:
        with open(path) as f:
            records = [json.loads(line) for line in f if line.strip()]
        samples = {r["step"]: r["fit_samples"] for r in records
                   if "fit_samples" in r and "compare" not in r}
        compared = {}
        for r in records:
            if "compare" in r and r["step"] >= first_step:
                if "slot_ranks" not in r:
                    sys.exit(f"{path}: comparison records without slot_ranks (a build before "
                             "they were written); rerun the job with this build")
                compared.setdefault(r["step"], {})[r["compare"]] = r
        for step, by_name in sorted(compared.items()):
            steps[(path, step)] = place(by_name, samples[step], path, step)
    return steps


def place(by_name, rows, path, step):
    """Each sample into its slot: rank by rank, the compared schedulers in
    the listed order, each rank's slots of one schedule in wave order."""
    names = [n for n in SCHEDULERS if n in by_name]
    world = 1 + max(r for n in names for ranks in by_name[n]["slot_ranks"] for r in ranks)
    out = {n: {"slots": list(zip(by_name[n]["slot_ranks"], by_name[n]["waves"])),
               "members": []} for n in names}
    i = 0
    for rank in range(world):
        for n in names:
            slots = out[n]["slots"]
            mine = sorted((s for s in range(len(slots)) if rank in slots[s][0]),
                          key=lambda s: slots[s][1])
            for s in mine:
                if i >= len(rows):
                    sys.exit(f"{path} step {step}: fewer fit_samples than slot members")
                g, tokens, tiles, peers, kv, seconds, row = (rows[i] + [0])[:7]
                # The eighth entry, the member's partial tiles (-1 or absent:
                # a record from before they were written).
                recorded = rows[i][7] if len(rows[i]) > 7 else -1
                if g != len(slots[s][0]):
                    sys.exit(f"{path} step {step}: sample {i} has g {g}, its slot {s} has "
                             f"{len(slots[s][0])} members; the records do not line up")
                out[n]["members"].append({
                    "slot": s, "rank": rank, "g": g, "tokens": tokens, "tiles": tiles,
                    "peers": peers, "kv": kv, "seconds": seconds, "row": row, "one": 1,
                    "partial_recorded": recorded})
                i += 1
    if i != len(rows):
        sys.exit(f"{path} step {step}: {len(rows) - i} fit_samples left over")
    return out


def solve(columns, y):
    """Normal equations by Gaussian elimination with partial pivoting, as
    calibration_fit.cpp's solve_least_squares; None when singular."""
    n = len(columns)
    m = [[sum(a * b for a, b in zip(columns[i], columns[j])) for j in range(n)]
         + [sum(a * b for a, b in zip(columns[i], y))] for i in range(n)]
    for c in range(n):
        pivot = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[pivot][c]) < 1e-300:
            return None
        m[c], m[pivot] = m[pivot], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [a - f * b for a, b in zip(m[r], m[c])]
    return [m[i][n] / m[i][i] for i in range(n)]


def nnls(columns, y):
    """calibration_fit.cpp's fit_nonnegative on plain errors: columns scaled
    to a largest magnitude of 1, least squares, the most negative term
    dropped until none is."""
    unit = [max(max(abs(v) for v in col), 1e-300) for col in columns]
    scaled = [[v / u for v in col] for col, u in zip(columns, unit)]
    active = list(range(len(columns)))
    out = [0.0] * len(columns)
    while active:
        x = solve([scaled[i] for i in active], y)
        if x is None:
            return None
        if min(x) >= 0:
            for i, v in zip(active, x):
                out[i] = v / unit[i]
            return out
        del active[x.index(min(x))]
    return out


def fit(members, terms, weights=None):
    """Non-negative least squares of the members' seconds on `terms`, each
    row scaled by its weight when given; a singular system drops terms in
    DROP_ORDER."""
    w = weights if weights is not None else [1.0] * len(members)
    y = [m["seconds"] * wi for m, wi in zip(members, w)]
    kept = list(terms)
    while True:
        x = nnls([[m[t] * wi for m, wi in zip(members, w)] for t in kept], y)
        if x is not None:
            return dict(zip(kept, x))
        drop = next((d for d in DROP_ORDER if d in kept), None)
        if drop is None:
            sys.exit("the fit is singular with every droppable term dropped")
        kept.remove(drop)


def price(member, coef):
    return sum(c * member[t] for t, c in coef.items())


def critical_path(slots, times, stretch=None, extra=None):
    """Slots in (wave, index) order, each starting when its members are free
    and lasting its slowest member (compare_results.cpp's replay); with
    `stretch`, a slot of g members lasts stretch[g] times that; with
    `extra`, slot s lasts extra[s] seconds longer."""
    free = {}
    for s in sorted(range(len(slots)), key=lambda s: slots[s][1]):
        ranks = slots[s][0]
        start = max((free.get(r, 0.0) for r in ranks), default=0.0)
        length = max(times.get((s, r), 0.0) for r in ranks)
        if stretch:
            length *= stretch.get(len(ranks), 1.0)
        if extra:
            length += extra.get(s, 0.0)
        for r in ranks:
            free[r] = start + length
    return max(free.values(), default=0.0)


def noisy_critical_path(slots, times, sigma, draws, rng):
    """The mean over `draws` replays of critical_path with every member's
    time independently multiplied by exp(sigma z - sigma^2 / 2), z drawn
    from the standard normal by `rng` (a factor of mean 1)."""
    total = 0.0
    for _ in range(draws):
        noisy = {k: t * math.exp(sigma * rng.gauss(0.0, 1.0) - sigma * sigma / 2)
                 for k, t in times.items()}
        total += critical_path(slots, noisy)
    return total / draws


def slot_ratios(steps, coef):
    """Per g: the slots' measured length (slowest member, measured) over
    their predicted length (slowest member, predicted), and the members'
    measured / predicted times: the wait of a slot on its slowest member
    shows where the first exceeds the second."""
    slots, members = {}, {}
    for step in steps:
        for sched in step.values():
            by_slot = {}
            for m in sched["members"]:
                by_slot.setdefault(m["slot"], []).append(m)
                members.setdefault(m["g"], []).append(m["seconds"] / price(m, coef))
            for ms in by_slot.values():
                ratio = max(m["seconds"] for m in ms) / max(price(m, coef) for m in ms)
                slots.setdefault(len(ms), []).append(ratio)
    return slots, members


def slot_members(sched):
    by_slot = {}
    for m in sched["members"]:
        by_slot.setdefault(m["slot"], []).append(m)
    return by_slot


def jitter_wait(ms, coef, form):
    """The slot's extra length per unit of j: X x e(g')."""
    p = [price(m, coef) for m in ms]
    x = statistics.fmean(p) if form == "mean" else max(p)
    return x * expected_max(sum(1 for m in ms if m["tokens"] > 0))


def fit_jitter(steps, coef, form):
    """j >= 0 by least squares through 0 of (measured - predicted slot
    length) on X x e(g'), over the slots of the given steps."""
    num = den = 0.0
    for step in steps:
        for sched in step.values():
            for ms in slot_members(sched).values():
                x = jitter_wait(ms, coef, form)
                r = max(m["seconds"] for m in ms) - max(price(m, coef) for m in ms)
                num += r * x
                den += x * x
    return max(0.0, num / den) if den > 0 else 0.0


def evaluate(train, test, terms, noise=(), draws=200):
    coef = fit([m for step in train for n in step for m in step[n]["members"]], terms)
    # The wait on the slowest member, learnt from the training steps: per g
    # the median of the slots' measured / predicted length.
    stretch = {g: statistics.median(v) for g, v in slot_ratios(train, coef)[0].items()}
    jitter = {form: fit_jitter(train, coef, form) for form in JITTER_FORMS}
    slots, members = slot_ratios(test, coef)
    out = {"coef": coef, "member": [], "by": {}, "rank": {n: [] for n in SCHEDULERS},
           "critical": {n: [0.0] * (3 + len(JITTER_FORMS)) for n in SCHEDULERS},
           "slots": slots, "members": members, "jitter": jitter,
           "slot_error": {f: {} for f in ["none"] + JITTER_FORMS},
           "noisy": {sigma: {n: 0.0 for n in SCHEDULERS} for sigma in noise}}
    for step in test:
        for n, sched in step.items():
            measured, predicted, rank_m, rank_p = {}, {}, {}, {}
            for m in sched["members"]:
                p = price(m, coef)
                e = (m["seconds"] - p) / p
                out["member"].append(abs(e))
                out["by"].setdefault((n, m["g"]), []).append(e)
                measured[(m["slot"], m["rank"])] = m["seconds"]
                predicted[(m["slot"], m["rank"])] = p
                rank_m[m["rank"]] = rank_m.get(m["rank"], 0.0) + m["seconds"]
                rank_p[m["rank"]] = rank_p.get(m["rank"], 0.0) + p
            out["rank"][n] += [(rank_m[r] - rank_p[r]) / rank_p[r] for r in rank_m]
            out["critical"][n][0] += critical_path(sched["slots"], measured)
            out["critical"][n][1] += critical_path(sched["slots"], predicted)
            out["critical"][n][2] += critical_path(sched["slots"], predicted, stretch)
            for k, form in enumerate(JITTER_FORMS):
                extra = {}
                for s, ms in slot_members(sched).items():
                    extra[s] = jitter[form] * jitter_wait(ms, coef, form)
                out["critical"][n][3 + k] += critical_path(sched["slots"], predicted,
                                                           extra=extra)
            slot_errors(out["slot_error"], slot_members(sched), coef, jitter)
            for sigma in noise:
                # The same draws for every scheduler's schedule and whatever
                # other sigmas are asked: a seed of its own per sigma.
                rng = random.Random(f"noise {sigma!r}")
                out["noisy"][sigma][n] += noisy_critical_path(sched["slots"], predicted, sigma,
                                                              draws, rng)
    return out


def slot_errors(into, by_slot, coef, jitter):
    """Per form and g: (measured - predicted) / predicted slot length."""
    for ms in by_slot.values():
        measured = max(m["seconds"] for m in ms)
        base = max(price(m, coef) for m in ms)
        for form in ["none"] + JITTER_FORMS:
            p = base if form == "none" else base + jitter[form] * jitter_wait(ms, coef, form)
            into[form].setdefault(len(ms), []).append((measured - p) / p)


def report(name, folds):
    """Pools the left-out steps of every fold."""
    member = [e for f in folds for e in f["member"]]
    rank = {n: [e for f in folds for e in f["rank"][n]] for n in SCHEDULERS}
    crit = {n: [sum(f["critical"][n][i] for f in folds) for i in range(3 + len(JITTER_FORMS))]
            for n in SCHEDULERS}
    by = {}
    for f in folds:
        for key, v in f["by"].items():
            by.setdefault(key, []).extend(v)
    print(f"\nmodel {name}: terms per fold "
          + "; ".join(", ".join(f"{t} {c:.3g}" for t, c in f["coef"].items()) for f in folds))
    print(f"  held-out slot members: median |e| {100 * statistics.median(member):.1f}%")
    for n in SCHEDULERS:
        r = rank[n]
        print(f"  {n:13} per-rank error median |e| {100 * statistics.median(map(abs, r)):5.1f}% "
              f"({100 * min(r):+.1f}% to {100 * max(r):+.1f}%), critical path measured "
              f"{crit[n][0]:.3f} s, predicted {crit[n][1]:.3f} s "
              f"({100 * (crit[n][0] - crit[n][1]) / crit[n][1]:+.1f}%)")
    for base in ("fixed", "megatron_dcp"):
        m = crit[base][0] / crit["hybrid"][0]
        p = crit[base][1] / crit["hybrid"][1]
        print(f"  hybrid over {base:13} measured {m:.3f}x, predicted {p:.3f}x "
              f"({100 * (m - p):+.1f} points)")
    for base in ("fixed", "megatron_dcp"):
        m = crit[base][0] / crit["hybrid"][0]
        p = crit[base][2] / crit["hybrid"][2]
        print(f"  with the training steps' wait on the slowest member (slots of g stretched by "
              f"their median measured / predicted length): hybrid over {base} predicted "
              f"{p:.3f}x ({100 * (m - p):+.1f} points)")
    jitter = report_jitter(folds, crit)
    noisy = report_noise(folds, crit)
    cells = [f"{n} g={g}: {100 * statistics.median(v):+.1f}% ({len(v)})"
             for (n, g), v in sorted(by.items())]
    print("  signed member residual (measured - predicted) / predicted, median (count): "
          + "; ".join(cells))
    slots, members = {}, {}
    for f in folds:
        for g, v in f["slots"].items():
            slots.setdefault(g, []).extend(v)
        for g, v in f["members"].items():
            members.setdefault(g, []).extend(v)
    print("  per g, measured / predicted of the slot (its slowest member) against that of its "
          "members, medians: " + "; ".join(
              f"g={g}: slot {statistics.median(slots[g]):.3f}, members "
              f"{statistics.median(members[g]):.3f}" for g in sorted(slots)))
    return {"member_median_abs": statistics.median(member),
            "rank_median_abs": {n: statistics.median(map(abs, rank[n])) for n in SCHEDULERS},
            "critical": crit, "jitter": jitter, "noisy": noisy}


def report_noise(folds, crit):
    """Per --noise sigma: the held-out critical paths replayed with noisy
    predicted member times, against the measured ones, and the speed-ups."""
    out = {}
    for sigma in folds[0]["noisy"] if folds else []:
        paths = {n: sum(f["noisy"][sigma][n] for f in folds) for n in SCHEDULERS}
        gains = {}
        for base in ("fixed", "megatron_dcp"):
            gains[base] = [crit[base][0] / crit["hybrid"][0], paths[base] / paths["hybrid"]]
        print(f"  member noise sigma {sigma:g}: critical path measured / noisy prediction "
              + ", ".join(f"{n} {crit[n][0] / paths[n]:.3f}" for n in SCHEDULERS)
              + "; hybrid over fixed predicted "
              f"{gains['fixed'][1]:.3f}x ({100 * (gains['fixed'][0] - gains['fixed'][1]):+.1f} "
              f"points), over megatron_dcp {gains['megatron_dcp'][1]:.3f}x "
              f"({100 * (gains['megatron_dcp'][0] - gains['megatron_dcp'][1]):+.1f})")
        out[str(sigma)] = {"critical": paths, "gains": gains}
    return out


def report_jitter(folds, crit):
    """The member_jitter candidate: its fitted j per fold, the held-out
    slot-length error per g and the held-out speedups, against no term."""
    out = {}
    for k, form in enumerate(["none"] + JITTER_FORMS):
        errors = {}
        for f in folds:
            for g, v in f["slot_error"][form].items():
                errors.setdefault(g, []).extend(v)
        pooled = [e for v in errors.values() for e in v]
        column = 1 if form == "none" else 2 + k
        gains = {}
        for base in ("fixed", "megatron_dcp"):
            m = crit[base][0] / crit["hybrid"][0]
            p = crit[base][column] / crit["hybrid"][column]
            gains[base] = [m, p]
        js = [f["jitter"][form] for f in folds] if form != "none" else []
        print(f"  slot end {'without jitter' if form == 'none' else 'jitter ' + form:14}"
              + (f" (j per fold {', '.join(f'{j:.3f}' for j in js)})" if js else "")
              + f": held-out slot length median |e| {100 * statistics.median(map(abs, pooled)):.1f}%"
              + ", signed median per g " + "; ".join(
                  f"g={g} {100 * statistics.median(v):+.1f}%" for g, v in sorted(errors.items()))
              + "; hybrid over fixed predicted " + f"{gains['fixed'][1]:.3f}x "
              f"({100 * (gains['fixed'][0] - gains['fixed'][1]):+.1f} points), over megatron_dcp "
              f"{gains['megatron_dcp'][1]:.3f}x "
              f"({100 * (gains['megatron_dcp'][0] - gains['megatron_dcp'][1]):+.1f})")
        out[form] = {"j": js, "slot_median_abs": statistics.median(map(abs, pooled)),
                     "gains": gains}
    return out


def run_main(main, prog):
    """Runs a script's main so that a refusal (sys.exit with a message) and
    an input that cannot be read or is not a job's records end in one line
    on stderr and exit 2, as the project's other commands do."""
    try:
        main()
    except SystemExit as stop:
        if isinstance(stop.code, str):
            print(f"{prog}: {stop.code}", file=sys.stderr)
            sys.exit(2)
        raise
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"{prog}: cannot use its input ({type(error).__name__}: {error}); give the "
              "records a finished job wrote", file=sys.stderr)
        sys.exit(2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("metrics", nargs="+")
    parser.add_argument("--first-step", type=int, default=2)
    parser.add_argument("--models", default="base,row,group")
    parser.add_argument("--out", help="write the figures as JSON here")
    parser.add_argument("--noise", default="",
                        help="comma-separated sigmas of member noise to replay with (e.g. 0.1,0.2)")
    parser.add_argument("--draws", type=int, default=200, help="replays per schedule with --noise")
    args = parser.parse_args()
    try:
        # A sigma asked twice is asked once (its figures would add up twice).
        noise = list(dict.fromkeys(float(x) for x in args.noise.split(",") if x.strip()))
    except ValueError:
        sys.exit(f"--noise {args.noise!r}: give comma-separated numbers, e.g. 0.1,0.2")
    if any(not math.isfinite(x) or x < 0 or x > 3 for x in noise):
        sys.exit(f"--noise {args.noise!r}: each sigma must be a number from 0 to 3")
    if args.draws < 1 or args.draws > 100000:
        sys.exit(f"--draws {args.draws}: give a whole number from 1 to 100000")
    steps = load(args.metrics, args.first_step)
    keys = sorted(steps)
    if len(keys) < 2:
        sys.exit("need at least two measured steps (one to fit, one to test)")
    print(f"{len(keys)} measured steps from {len(args.metrics)} file(s); each step left out "
          "in turn, the terms fitted on the others")
    results = {}
    for name in args.models.split(","):
        folds = [evaluate([steps[k] for k in keys if k != held], [steps[held]], MODELS[name],
                          noise, args.draws)
                 for held in keys]
        results[name] = report(name, folds)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    run_main(main, "reprice_fit.py")
