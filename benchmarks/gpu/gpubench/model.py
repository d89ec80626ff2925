"""The tile model against measured kernel times, and the cost-profile fit.

Two predictions of a rank's fwd + bwd time, both from its plan alone:
- proportional: the tile model as the imbalance figures use it. Within one
  (row, mask, P, strategy), rank r is predicted at mean(measured) x tiles_r /
  mean(tiles): right whenever time is linear in tiles, whatever the slope.
- affine, held out: t = a x tiles + b x tokens + c fitted by least squares
  on every other row and predicting this one, so the error is what a profile
  fitted elsewhere would make here.
A third fit splits tiles into full and partial ones: if partially filled
tiles are cheaper, its partial-tile coefficient comes out below the full one.
"""

import math

import numpy as np

PROFILE_KEYS = ("name", "tile_seconds", "token_seconds", "slot_seconds", "kv_bytes_per_token",
                "intra_node_bytes_per_second", "inter_node_bytes_per_second", "latency_seconds",
                "ranks_per_node")


def least_squares(columns, target):
    """Coefficients of target ~ columns (each a 1-D array); NaN when the
    system has fewer rows than unknowns."""
    a = np.column_stack([np.asarray(c, dtype=float) for c in columns])
    y = np.asarray(target, dtype=float)
    if a.shape[0] < a.shape[1]:
        return np.full(a.shape[1], math.nan)
    return np.linalg.lstsq(a, y, rcond=None)[0]


def nonnegative_least_squares(columns, target):
    """least_squares with every coefficient >= 0: a column whose coefficient
    comes out negative is dropped (held at 0) and the rest refitted. A cost
    profile with a negative cost per tile would reward wasted tiles."""
    active = list(range(len(columns)))
    coef = np.zeros(len(columns))
    while active:
        fitted = least_squares([columns[i] for i in active], target)
        if np.isnan(fitted).any():
            return np.full(len(columns), math.nan)
        if (fitted >= 0).all():
            coef[active] = fitted
            return coef
        active.pop(int(np.argmin(fitted)))
    return coef


def pearson(x, y):
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size < 2 or x.std() == 0 or y.std() == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


def group_key(record):
    return (record["row"], record["mask"], record["cp"], record["strategy"], record["kernel"])


def proportional_predictions(records):
    """record id -> predicted ms (fwd + bwd) under the proportional tile model."""
    groups = {}
    for i, r in enumerate(records):
        groups.setdefault(group_key(r), []).append(i)
    predicted = {}
    for members in groups.values():
        tiles = np.array([records[i]["tiles"] for i in members], dtype=float)
        times = np.array([records[i]["fwd_ms"] + records[i]["bwd_ms"] for i in members])
        if tiles.mean() == 0:
            continue
        for i, t in zip(members, tiles):
            predicted[i] = times.mean() * t / tiles.mean()
    return predicted


def held_out_affine(records, phase_keys=("fwd_ms", "bwd_ms")):
    """record id -> predicted ms from a*tiles + b*tokens + c fitted on the
    other rows (leave one row out)."""
    rows = sorted({r["row"] for r in records})
    predicted = {}
    for row in rows:
        train = [r for r in records if r["row"] != row]
        test = [(i, r) for i, r in enumerate(records) if r["row"] == row]
        if len(train) < 3:
            continue
        total = np.zeros(len(test))
        for key in phase_keys:
            coef = least_squares([[r["tiles"] for r in train], [r["tokens"] for r in train],
                                  np.ones(len(train))], [r[key] for r in train])
            total += np.array([coef[0] * r["tiles"] + coef[1] * r["tokens"] + coef[2]
                               for _, r in test])
        for (i, _), value in zip(test, total):
            predicted[i] = float(value)
    return predicted


def fit_phases(records):
    """{phase: {"tile_ms", "token_ms", "const_ms", "full_tile_ms",
    "partial_tile_ms", "r2"}} for fwd and bwd; coefficients non-negative."""
    fits = {}
    tiles = [r["tiles"] for r in records]
    tokens = [r["tokens"] for r in records]
    ones = np.ones(len(records))
    for phase in ("fwd", "bwd"):
        y = np.array([r[f"{phase}_ms"] for r in records], dtype=float)
        a, b, c = nonnegative_least_squares([tiles, tokens, ones], y)
        pred = a * np.asarray(tiles) + b * np.asarray(tokens) + c
        ss = float(((y - y.mean()) ** 2).sum()) if y.size else 0.0
        r2 = 1 - float(((y - pred) ** 2).sum()) / ss if ss > 0 else math.nan
        full, partial, _, _ = nonnegative_least_squares(
            [[r["full_tiles"] for r in records], [r["partial_tiles"] for r in records], tokens,
             ones], y)
        fits[phase] = {"tile_ms": float(a), "token_ms": float(b), "const_ms": float(c),
                       "full_tile_ms": float(full), "partial_tile_ms": float(partial),
                       "r2": r2}
    return fits


def profile_from_fits(fits, name, kv_bytes_per_token, comm=None):
    """The cost-profile mapping (CostProfile's keys): kernel coefficients from
    the fits, fwd + bwd, in seconds per tile and per token. The communication
    figures come from `comm` when measured, else stay 0 (not measured)."""
    comm = comm or {}
    return {
        "name": name,
        "tile_seconds": (fits["fwd"]["tile_ms"] + fits["bwd"]["tile_ms"]) * 1e-3,
        "token_seconds": (fits["fwd"]["token_ms"] + fits["bwd"]["token_ms"]) * 1e-3,
        "slot_seconds": max(0.0, (fits["fwd"]["const_ms"] + fits["bwd"]["const_ms"]) * 1e-3),
        "kv_bytes_per_token": float(kv_bytes_per_token),
        "intra_node_bytes_per_second": float(comm.get("intra_node_bytes_per_second", 0.0)),
        "inter_node_bytes_per_second": float(comm.get("inter_node_bytes_per_second", 0.0)),
        "latency_seconds": float(comm.get("latency_seconds", 0.0)),
        "ranks_per_node": int(comm.get("ranks_per_node", 8)),
    }


def profile_yaml(profile, provenance_lines):
    """The profile as YAML text: provenance as comments, then one mapping with
    exactly the CostProfile keys."""
    missing = [k for k in PROFILE_KEYS if k not in profile]
    if missing:
        raise ValueError(f"profile lacks {', '.join(missing)}")
    out = [f"# {line}" for line in provenance_lines]
    for key in PROFILE_KEYS:
        value = profile[key]
        if isinstance(value, str):
            out.append(f"{key}: {value}")
        elif isinstance(value, int):
            out.append(f"{key}: {value}")
        else:
            out.append(f"{key}: {value:.6e}")
    return "\n".join(out) + "\n"
