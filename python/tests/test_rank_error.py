"""benchmarks/rank_error.py on synthetic metrics records (the generator of
test_reprice_fit.py): every candidate fit recovers a planted model, a
planted per-step speed factor is exactly the per-rank error a forward fit
leaves and exactly what removing the step's factor takes away, the split
by group size adds up to the rank's error, and the noise floor against a
direct recount."""

import json
import pathlib
import random
import subprocess
import sys

import pytest

import scripts


rank_error = scripts.benchmark("rank_error")
jobs = scripts.load("reprice_fit_jobs", pathlib.Path(__file__).with_name("test_reprice_fit.py"))


def scale_job(path, factors):
    """Multiplies every sample time of step s by factors[s]: the machine
    running a whole step faster or slower."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        if "fit_samples" in line:
            for row in line["fit_samples"]:
                row[5] *= factors[line["step"]]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def steps_of(paths):
    steps = rank_error.rf.load([str(p) for p in paths], 2)
    gs = sorted({m["g"] for m in rank_error.members_of(steps.values())})
    rank_error.with_g_columns(steps.values(), gs)
    return steps


def test_every_candidate_recovers_a_planted_model(tmp_path):
    path = tmp_path / "w4.jsonl"
    jobs.write_job(path, random.Random(11), 4, 4)
    steps = steps_of([path])
    for name in ("member", "member_rel", "rank_sum", "rank_sum_rel", "g_const"):
        res = rank_error.evaluate(steps, name, "loo")
        errors = [e for n in rank_error.SCHEDULERS for e in res["rank"][n]]
        assert len(errors) > 0
        assert max(abs(e) for e in errors) < 1e-6, name
        for measured, predicted, _ in res["crit"].values():
            assert abs(measured - predicted) < 1e-6 * measured, name


def test_a_step_speed_factor_is_what_a_forward_fit_misses(tmp_path):
    path = tmp_path / "w4.jsonl"
    jobs.write_job(path, random.Random(12), 4, 4)
    factors = {2: 1.0, 3: 1.25, 4: 0.9, 5: 1.1}
    scale_job(path, factors)
    steps = steps_of([path])
    res = rank_error.evaluate(steps, "member", "fwd1")
    # Fitted on step s - 1 alone, the profile is that step's speed times the
    # truth: every rank of step s is off by factors[s] / factors[s - 1] - 1.
    expected = [factors[s] / factors[s - 1] - 1 for s in (3, 4, 5)]
    assert [round(f, 9) for f in res["factors"]] == [round(1 + e, 9) for e in expected]
    for n in rank_error.SCHEDULERS:
        assert res["rank"][n]
        assert any(abs(e - x) < 1e-9 for e in res["rank"][n] for x in expected)
        assert all(min(abs(e - x) for x in expected) < 1e-9 for e in res["rank"][n])
        assert max(abs(e) for e in res["factored"][n]) < 1e-9


def test_the_split_by_group_size_adds_up_to_the_rank_error(tmp_path):
    path = tmp_path / "w6.jsonl"
    jobs.write_job(path, random.Random(13), 6, 3)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    noise = random.Random(14)
    for line in lines:
        for row in line.get("fit_samples", []):
            row[5] *= noise.uniform(0.7, 1.4)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    steps = steps_of([path])
    res = rank_error.evaluate(steps, "member", "loo")
    assert res["ranks"]
    for _, error, parts, shares in res["ranks"]:
        assert abs(sum(parts.values()) - error) < 1e-9
        # The term shares of a rank's predicted time add up to all of it.
        assert abs(sum(shares.values()) - 1.0) < 1e-9


def test_noise_floor_against_a_recount(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    jobs.write_job(a, random.Random(15), 4, 2)
    lines = [json.loads(line) for line in a.read_text().splitlines()]
    noise = random.Random(16)
    for line in lines:
        for row in line.get("fit_samples", []):
            row[5] *= noise.uniform(0.8, 1.2)
    b.write_text("".join(json.dumps(line) + "\n" for line in lines))
    steps = steps_of([a, b])
    diffs = rank_error.noise_floor(steps)
    recount = []
    for step in (2, 3):
        for n in rank_error.SCHEDULERS:
            ta = rank_error.rank_totals(steps[(str(a), step)][n])
            tb = rank_error.rank_totals(steps[(str(b), step)][n])
            recount += [abs(ta[r] - tb[r]) * 2 / (ta[r] + tb[r]) for r in sorted(ta)]
    assert sorted(diffs) == sorted(recount)
    assert len(diffs) > 0 and max(diffs) > 0


def test_the_jobs_filter_beside_the_sum_of_member_medians(tmp_path, capsys):
    path = tmp_path / "w4.jsonl"
    jobs.write_job(path, random.Random(17), 4, 3)
    steps = steps_of([path])
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    want = {n: [] for n in rank_error.SCHEDULERS}
    for line in lines:
        if "compare" not in line:
            continue
        totals = rank_error.rank_totals(steps[(str(path), line["step"])][line["compare"]])
        predicted = [1e3 * totals.get(r, 0.0) / 1.25 for r in range(4)]
        line["predicted_rank_ms"] = predicted
        line["prediction_error"] = [0.01 * r for r in range(4)]
        if line["step"] > 2:  # the first step planned with the start profile
            want[line["compare"]] += [(0.01 * r, 0.25) for r in range(4) if predicted[r] > 0]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    job, summed = rank_error.filters([str(path)], steps)
    for n in rank_error.SCHEDULERS:
        assert want[n]
        assert job[n] == [a for a, _ in want[n]]
        assert all(abs(e - 0.25) < 1e-9 for e in summed[n]) and len(summed[n]) == len(want[n])
    assert "median |e|" in capsys.readouterr().out


def test_the_filter_scale_takes_out_a_constant_gap_between_the_filters(tmp_path):
    path = tmp_path / "w4.jsonl"
    jobs.write_job(path, random.Random(18), 4, 4)
    steps = steps_of([path])
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        if "compare" in line:
            totals = rank_error.rank_totals(steps[(str(path), line["step"])][line["compare"]])
            line["rank_median_ms"] = [1.07e3 * totals.get(r, 0.0) for r in range(4)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    plain, scaled, scales = rank_error.filter_scale([str(path)], steps)
    assert len(scales) == 3 and all(abs(s - 1.07) < 1e-6 for s in scales)
    for n in rank_error.SCHEDULERS:
        assert plain[n] and all(abs(e - 0.07) < 1e-6 for e in plain[n])
        assert all(abs(e) < 1e-6 for e in scaled[n])


@pytest.mark.parametrize("script", ["rank_error", "reprice_fit"])
@pytest.mark.parametrize("bad", ["missing", "directory", "not_json", "no_steps"])
def test_inputs_that_are_not_a_jobs_records_are_refused_in_one_line(tmp_path, script, bad):
    path = {"missing": tmp_path / "none.jsonl", "directory": tmp_path}.get(bad,
                                                                         tmp_path / "m.jsonl")
    if bad == "not_json":
        path.write_text("{\"step\": 1\n")
    elif bad == "no_steps":
        path.write_text("{\"step\": 1}\n")
    done = subprocess.run([sys.executable, str(scripts.ROOT / "benchmarks" / f"{script}.py"),
                           str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"{script}.py: ")
