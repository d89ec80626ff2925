"""benchmarks/reprice_fit.py on synthetic metrics records: samples placed in
their slots as the trainer writes them (rank by rank, schedulers in order,
each rank's members in wave order), a planted row term recovered only by
the model that has it, and the replay against a longest-path recount."""

import json
import math
import random
import statistics
import subprocess
import sys

import scripts

reprice_fit = scripts.benchmark("reprice_fit")

TRUTH = {"tiles": 3e-4, "tokens": 1e-5, "one": 2e-3, "row": 6e-6, "kv": 0.0, "peers": 5e-4}


def random_schedule(rng, world):
    """Slots of random groups in waves, every rank in at most one slot per
    wave, each with random member counts."""
    slots = []
    for wave in range(rng.randint(1, 3)):
        free = list(range(world))
        rng.shuffle(free)
        while free:
            g = rng.randint(1, len(free))
            ranks, free = sorted(free[:g]), free[g:]
            if rng.random() < 0.8:
                slots.append((ranks, wave))
    rng.shuffle(slots)  # slot order is not wave order
    members = []
    for ranks, _ in slots:
        tokens = [rng.randint(16, 400) for _ in ranks]
        members.append([{"g": len(ranks), "tokens": t, "tiles": rng.randint(1, 200),
                         "peers": len(ranks) - 1, "kv": 1024 * rng.randint(0, 300),
                         "row": sum(tokens)} for t in tokens])
    return slots, members


def seconds(m):
    return sum(c * (1 if t == "one" else m[t]) for t, c in TRUTH.items())


def write_job(path, rng, world, steps):
    """The metrics lines of `steps` measured steps of a compared job."""
    lines = []
    for step in range(2, 2 + steps):
        schedules = {n: random_schedule(rng, world) for n in reprice_fit.SCHEDULERS}
        rows = []
        for rank in range(world):
            for n in reprice_fit.SCHEDULERS:
                slots, members = schedules[n]
                mine = sorted((s for s in range(len(slots)) if rank in slots[s][0]),
                              key=lambda s: slots[s][1])
                for s in mine:
                    m = members[s][slots[s][0].index(rank)]
                    rows.append([m["g"], m["tokens"], m["tiles"], m["peers"], m["kv"],
                                 seconds(m), m["row"]])
        lines.append({"step": step, "scheduler": "hybrid", "fit_samples": rows})
        for n in reprice_fit.SCHEDULERS:
            slots, _ = schedules[n]
            lines.append({"step": step, "compare": n, "slot_ranks": [s[0] for s in slots],
                          "waves": [s[1] for s in slots]})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_samples_land_in_their_slots_and_the_row_model_recovers_the_truth(tmp_path):
    rng = random.Random(4)
    path = tmp_path / "w4.jsonl"
    write_job(path, rng, 4, 3)
    steps = reprice_fit.load([str(path)], 2)
    assert len(steps) == 3
    for step in steps.values():
        for sched in step.values():
            for m in sched["members"]:
                # Placed right: its slot holds its rank and its g members.
                ranks, _ = sched["slots"][m["slot"]]
                assert m["rank"] in ranks and m["g"] == len(ranks)
                assert abs(m["seconds"] - seconds(m)) < 1e-12
    keys = sorted(steps)
    row = reprice_fit.evaluate([steps[k] for k in keys[1:]], [steps[keys[0]]],
                               reprice_fit.MODELS["row"])
    assert max(row["member"]) < 1e-6
    for name, (measured, predicted, *_stretched) in row["critical"].items():
        assert abs(measured - predicted) < 1e-6 * measured, name
    base = reprice_fit.evaluate([steps[k] for k in keys[1:]], [steps[keys[0]]],
                                reprice_fit.MODELS["base"])
    assert max(base["member"]) > 0.01  # without the row term the truth is out of reach


def test_replay_is_the_longest_path():
    rng = random.Random(5)
    for _ in range(200):
        world = rng.randint(1, 5)
        slots, _ = random_schedule(rng, world)
        times = {(s, r): rng.uniform(0.1, 2.0) for s, (ranks, _) in enumerate(slots)
                 for r in ranks}
        # Recount: a slot ends at its length plus the latest end among the
        # slots its members ran just before it.
        order = sorted(range(len(slots)), key=lambda s: slots[s][1])
        end, last = {}, {}
        for s in order:
            ranks = slots[s][0]
            start = max((end[last[r]] for r in ranks if r in last), default=0.0)
            end[s] = start + max(times[(s, r)] for r in ranks)
            for r in ranks:
                last[r] = s
        assert abs(reprice_fit.critical_path(slots, times) - max(end.values(), default=0.0)) \
            < 1e-12


def expected_max_lognormal(g, sigma):
    """E[max of g independent exp(sigma z - sigma^2 / 2)] by quadrature over
    z (the largest factor is the one of the largest z): an independent
    count of what noisy_critical_path estimates for one slot of g equal
    members."""
    normal = statistics.NormalDist()
    step = 1e-3
    total = 0.0
    z = -10.0
    while z < 10.0:
        total += (math.exp(sigma * z - sigma * sigma / 2) * g * normal.pdf(z)
                  * normal.cdf(z) ** (g - 1) * step)
        z += step
    return total


def test_noisy_replay_is_the_expected_slowest_member_and_exact_without_noise():
    rng = random.Random(6)
    for _ in range(50):
        slots, _ = random_schedule(rng, rng.randint(1, 5))
        times = {(s, r): rng.uniform(0.1, 2.0) for s, (ranks, _) in enumerate(slots)
                 for r in ranks}
        # sigma 0: every factor is exp(0) = 1, each replay the plain one
        # (their mean up to its rounding).
        plain = reprice_fit.critical_path(slots, times)
        assert abs(reprice_fit.noisy_critical_path(slots, times, 0.0, 10, rng) - plain) \
            <= 1e-12 * plain
    draws = 20000
    for g, sigma in [(1, 0.2), (2, 0.1), (4, 0.3), (8, 0.2)]:
        slots = [(list(range(g)), 0)]
        times = {(0, r): 2.0 for r in range(g)}
        got = reprice_fit.noisy_critical_path(slots, times, sigma, draws, random.Random(g))
        want = 2.0 * expected_max_lognormal(g, sigma)
        # The max of g factors spreads less than sigma x its mean: this is
        # several standard errors of the mean of `draws` replays, and a
        # fifth of the mean's bias without the -sigma^2 / 2 at sigma 0.3.
        assert abs(got - want) < 8 * sigma * want / math.sqrt(draws), (g, sigma)
        if g > 1:
            assert want > 2.0 * (1 + sigma / 4)  # waiting on the slowest member costs


def run_script(*args):
    return subprocess.run([sys.executable, str(scripts.ROOT / "benchmarks" / "reprice_fit.py"),
                           *args], capture_output=True, text=True, timeout=120)


def test_noise_option_refuses_bad_sigmas_in_one_line(tmp_path):
    path = tmp_path / "w4.jsonl"
    write_job(path, random.Random(7), 4, 2)
    for option, bad in [("--noise", "x"), ("--noise", "-0.1"), ("--noise", "nan"),
                        ("--noise", "5"), ("--draws", "0")]:
        done = run_script(str(path), option, bad)
        assert done.returncode == 2, (bad, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and option in done.stderr, done.stderr
    done = run_script(str(path), "--noise", "0.1", "--draws", "20", "--models", "row")
    assert done.returncode == 0, done.stderr
    assert "member noise sigma 0.1" in done.stdout
    # A sigma asked twice, or beside another, gives the figures it gives alone.
    for noise in ["0.1,0.1", "0.1,1e-1", "0.2,0.1"]:
        again = run_script(str(path), "--noise", noise, "--draws", "20", "--models", "row")
        assert again.returncode == 0, again.stderr
        lines = [line for line in again.stdout.splitlines() if "member noise sigma 0.1:" in line]
        assert lines == [line for line in done.stdout.splitlines()
                         if "member noise sigma 0.1:" in line], noise
