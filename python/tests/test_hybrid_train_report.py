"""benchmarks/hybrid_train.py's report figures against an independent
recount on random comparison records: which scheduler is slower than the
better baseline beyond the spread, and the exchange's hidden share."""

import random
import statistics

import scripts

hybrid_train = scripts.benchmark("hybrid_train")

NAMES = hybrid_train.SCHEDULERS


def summary(rng, reps):
    """A summarise()-shaped dict: per scheduler its repetitions' critical
    paths and a filtered sum that need not lie between them."""
    out = {}
    for name in NAMES:
        by_rep = [rng.uniform(50.0, 150.0) for _ in range(reps)]
        out[name] = {"by_repetition": by_rep,
                     "critical_ms": rng.uniform(0.8, 1.2) * statistics.median(by_rep),
                     "predicted_ms": rng.uniform(50.0, 150.0)}
    return out


def test_slower_beyond_the_spread_is_slower_in_every_repetition():
    rng = random.Random(21)
    seen = set()
    for _ in range(500):
        reps = rng.randint(1, 4)
        s = summary(rng, reps)
        got = hybrid_train.against_better_baseline(s)
        better = "fixed" if s["fixed"]["critical_ms"] <= s["megatron_dcp"]["critical_ms"] \
            else "megatron_dcp"
        assert got["better_baseline"] == better
        for name in NAMES:
            slower = all(s[name]["by_repetition"][r] > s[better]["by_repetition"][r]
                         for r in range(reps))
            assert got[name]["slower_beyond_spread"] == slower, (name, s)
            seen.add(slower)
        assert not got[better]["slower_beyond_spread"]
    assert seen == {True, False}


def metrics(rng, steps, world):
    """Step records with per-rank shares (some null), comparison records and
    loss lines, in the order the trainer writes them."""
    lines = []
    for step in range(1, steps + 1):
        lines.append({"step": step, "loss": 1.0})
        ranks = [{"rank": r, "exchange_hidden_share":
                  None if rng.random() < 0.2 else round(rng.random(), 4)}
                 for r in range(world)]
        lines.append({"step": step, "scheduler": "hybrid", "ranks": ranks})
        for name in NAMES:
            lines.append({"step": step, "compare": name,
                          "ranks": [{"exchange_hidden_share": 2.0}]})
    return lines


def test_hidden_share_counts_the_trained_steps_from_the_first_measured():
    rng = random.Random(6)
    for _ in range(200):
        steps, world, first = rng.randint(1, 4), rng.randint(1, 8), rng.randint(1, 3)
        m = metrics(rng, steps, world)
        want = [r["exchange_hidden_share"] for line in m
                if line.get("scheduler") == "hybrid" and line["step"] >= first
                for r in line["ranks"] if r["exchange_hidden_share"] is not None]
        got = hybrid_train.hidden_share(m, first)
        if not want:
            assert got is None
            continue
        assert got["count"] == len(want)
        assert got["median"] == statistics.median(want)
        assert got["range"] == [min(want), max(want)]


def test_step_factors_against_a_recount():
    rng = random.Random(8)
    for _ in range(200):
        steps, world, first = rng.randint(1, 4), rng.randint(1, 6), rng.randint(1, 3)
        lines, truth = [], {}
        for step in range(1, steps + 1):
            truth[step] = rng.uniform(0.7, 1.4)
            lines.append({"step": step, "scheduler": "hybrid"})
            for name in NAMES:
                predicted = [rng.choice([0.0, rng.uniform(10, 100)]) for _ in range(world)]
                noise = [rng.uniform(0.8, 1.25) for _ in range(world)]
                lines.append({"step": step, "compare": name, "predicted_rank_ms": predicted,
                              "rank_median_ms": [p * truth[step] * e
                                                 for p, e in zip(predicted, noise)]})
        got = hybrid_train.step_factors(lines, first)
        # Recount: per step the median ratio, then each rank over it.
        want_f, want_e = {}, {n: [] for n in NAMES}
        for step in range(first, steps + 1):
            rows = [(m["compare"], med, p) for m in lines
                    if m.get("compare") and m["step"] == step
                    for med, p in zip(m["rank_median_ms"], m["predicted_rank_ms"]) if p > 0]
            if not rows:
                continue
            ratios = sorted(med / p for _, med, p in rows)
            k = len(ratios)
            want_f[step] = ratios[k // 2] if k % 2 else (ratios[k // 2 - 1] + ratios[k // 2]) / 2
            for name, med, p in rows:
                want_e[name].append(abs(med / p / want_f[step] - 1))
        if not want_f:
            assert got is None
            continue
        assert got["factors"].keys() == want_f.keys()
        for step, f in want_f.items():
            assert abs(got["factors"][step] - f) < 1e-12
            assert 0.8 * truth[step] <= f <= 1.25 * truth[step]
        for name in NAMES:
            if want_e[name]:
                assert abs(got["error_median_abs"][name] - statistics.median(want_e[name])) < 1e-12
            else:
                assert got["error_median_abs"][name] is None
