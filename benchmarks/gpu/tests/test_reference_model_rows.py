"""The correctness check, the tile-model fits, the rows and the entry script
on the CPU (what runs before and after the kernel on a GPU)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from gpubench import kernels, masks, model, plans, rows

torch = pytest.importorskip("torch")
RUN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "run.py")


@pytest.mark.parametrize("mask", [masks.MaskSpec("causal"), masks.MaskSpec("sliding", 40)],
                         ids=str)
def test_rank_attention_matches_the_unsharded_reference(cli, mask):
    doc_lengths = [90, 7, 150, 33]
    positions, _ = plans.plan("balanced", doc_lengths, 3, mask, 16, cli)
    for rank in positions:
        errors = kernels.reference_check(rank, doc_lengths, mask, heads=4, kv_heads=2,
                                         head_dim=8)
        assert max(errors.values()) < 1e-5, errors


def test_the_reference_check_catches_a_wrong_mask(cli):
    """A kernel whose mask rows follow another order than the rank's queries
    (the bug a plan-order mistake makes) fails the check."""
    doc_lengths = [200, 60]
    mask = masks.MaskSpec("causal")
    positions, _ = plans.plan("head_tail", doc_lengths, 2, mask, 16, cli)
    assert (positions[0] != positions[0][::-1]).any()
    wrong = torch.as_tensor(masks.dense_mask(positions[0][::-1].copy(), doc_lengths, mask))

    def kernel(q, k, v):
        return kernels.masked_attention(q, k, v, wrong)
    errors = kernels.reference_check(positions[0], doc_lengths, mask, 2, 1, 8, kernel=kernel,
                                     dtype=torch.float32)
    assert errors["out"] > 0.1


def test_masked_attention_rows_without_keys_are_zero():
    q = torch.randn(1, 2, 3, 4, requires_grad=True)
    k = torch.randn(1, 1, 5, 4)
    v = torch.randn(1, 1, 5, 4)
    allowed = torch.zeros(3, 5, dtype=torch.bool)
    allowed[0, :2] = True
    out = kernels.masked_attention(q, k, v, allowed)
    assert torch.all(out[:, :, 1:] == 0)
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


def records_from(tiles_per_group, tile_ms, token_ms, const_ms, tokens=100):
    out = []
    for g, tiles in enumerate(tiles_per_group):
        for rank, t in enumerate(tiles):
            out.append({"row": f"r{g % 3}", "mask": "causal", "cp": len(tiles),
                        "strategy": f"s{g}", "kernel": "flex", "rank": rank, "tiles": t,
                        "full_tiles": t // 2, "partial_tiles": t - t // 2,
                        "tokens": tokens + rank,
                        "fwd_ms": tile_ms * t + token_ms * (tokens + rank) + const_ms,
                        "bwd_ms": 2 * (tile_ms * t + token_ms * (tokens + rank) + const_ms)})
    return out


def test_fits_recover_known_coefficients_and_predict_held_out_rows():
    rng = np.random.default_rng(0)
    groups = [rng.integers(10, 500, size=4).tolist() for _ in range(9)]
    records = records_from(groups, tile_ms=0.01, token_ms=0.002, const_ms=0.5)
    fits = model.fit_phases(records)
    assert fits["fwd"]["tile_ms"] == pytest.approx(0.01, rel=1e-6)
    assert fits["fwd"]["token_ms"] == pytest.approx(0.002, rel=1e-6)
    assert fits["bwd"]["const_ms"] == pytest.approx(1.0, rel=1e-6)
    held = model.held_out_affine(records)
    for i, r in enumerate(records):
        assert held[i] == pytest.approx(r["fwd_ms"] + r["bwd_ms"], rel=1e-6)


def test_proportional_model_is_exact_when_time_is_linear_in_tiles():
    records = records_from([[10, 20, 30], [5, 5, 50]], tile_ms=0.1, token_ms=0.0, const_ms=0.0,
                           tokens=0)
    for r in records:  # no per-token part at all
        r["fwd_ms"] = 0.1 * r["tiles"]
        r["bwd_ms"] = 0.2 * r["tiles"]
    predicted = model.proportional_predictions(records)
    for i, r in enumerate(records):
        assert predicted[i] == pytest.approx(r["fwd_ms"] + r["bwd_ms"])


def test_negative_slopes_are_held_at_zero():
    coef = model.nonnegative_least_squares([[1, 2, 3, 4], [1, 1, 1, 1]], [4, 3, 2, 1])
    assert (coef >= 0).all()
    assert coef[0] == 0 and coef[1] == pytest.approx(2.5)


def test_profile_yaml_has_exactly_the_cost_profile_keys():
    fits = {p: {"tile_ms": 1e-3, "token_ms": 1e-6, "const_ms": 0.1} for p in ("fwd", "bwd")}
    text = model.profile_yaml(model.profile_from_fits(fits, "x", 4096), ["made by a test"])
    body = [line for line in text.splitlines() if not line.startswith("#")]
    assert [line.split(":")[0] for line in body] == list(model.PROFILE_KEYS)
    values = dict(line.split(": ") for line in body)
    assert float(values["tile_seconds"]) == pytest.approx(2e-6)
    assert float(values["token_seconds"]) == pytest.approx(2e-9)


def test_packing_keeps_every_token_and_cuts_only_where_a_row_ends():
    lengths = [5, 12, 3, 30, 1, 9]
    packed = rows.pack_rows(lengths, 10, count=100, seed=1)
    assert all(sum(r) == 10 for r in packed)
    assert sum(map(sum, packed)) == 60  # 60 tokens, six full rows
    chosen = rows.rows_at_work_percentiles(lengths, 10, percentiles=(0, 99), candidates=6,
                                            seed=1)
    work = sorted(sum(x * x for x in r) for r in packed)
    assert [sum(x * x for x in r) for r in chosen] == [work[0], work[-1]]
    with pytest.raises(ValueError, match="fewer than one row"):
        rows.pack_rows([3, 4], 10, 1)


def test_rows_are_synthetic_and_say_so_without_the_workloads(tmp_path):
    built = rows.build_rows(repo_root=str(tmp_path / "repo"), packed_lengths=(4096,))
    packed = [r for r in built if r.kind == "packed"]
    assert packed and all("synthetic" in r.source for r in packed)
    assert all(r.tokens == 4096 for r in packed)
    assert {r.tokens for r in built if r.kind == "single"} == set(rows.SINGLE_LENGTHS)
    assert any(n % 32 for n in rows.SINGLE_LENGTHS)  # a length head-tail cannot split


def run(*args, **kwargs):
    return subprocess.run([sys.executable, RUN, *args], capture_output=True, text=True,
                          timeout=600, **kwargs)


def test_quick_run_writes_records_tables_and_a_profile(cli, tmp_path):
    out = tmp_path / "out"
    done = run("--quick", "--out", str(out), "--cli", cli, "--cp", "2,3", "--block-size", "32",
               "--heads", "2", "--kv-heads", "1", "--head-dim", "8", "--reps", "1",
               "--warmup", "0", "--masks", "causal,sliding:64")
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    checks = summary["checks"]
    assert {c["strategy"] for c in checks if c["status"] == "ok"} >= set(plans.FULCRUM_STRATEGIES)
    assert all(c["status"] in ("ok", "undefined") for c in checks)
    groups = summary["groups"]
    # 3 rows x 2 masks x 2 P x 6 fulcrum strategies, each with every rank.
    assert len([g for g in groups if g["strategy"] in plans.FULCRUM_STRATEGIES]) == 72
    assert all(len(g["rank_ms"]) == g["cp"] for g in groups)
    if plans.torch_balancers()[0] is None:
        assert {u["strategy"] for u in summary["undefined"]} == set(plans.TORCH_STRATEGIES)
    text = (out / "summary.md").read_text()
    assert "times are not GPU figures" in text and "| quick_single_odd |" in text
    profile = (out / "profile.yaml").read_text()
    assert "name: cpu_quick_dense" in profile
    # A second run refuses to mix its records into the first one's.
    again = run("--quick", "--out", str(out), "--cli", cli)
    assert again.returncode == 2 and "not empty" in again.stderr


@pytest.mark.parametrize("args, says", [
    (["--cp", "4,x"], "--cp"),
    (["--heads", "6", "--kv-heads", "4"], "multiple of --kv-heads"),
    (["--masks", "prefix:3"], "not supported"),
    (["--strategies", "zigzag"], "unknown"),
    (["--reps", "0"], "--reps"),
])
def test_bad_arguments_exit_2_with_one_line(tmp_path, args, says):
    done = run("--quick", "--out", str(tmp_path / "o"), *args)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and says in done.stderr


def test_the_timed_run_needs_a_gpu(tmp_path, cli):
    if kernels.features()["cuda"]:
        pytest.skip("a GPU is present")
    done = run("--out", str(tmp_path / "o"), "--cli", cli)
    assert done.returncode == 2 and "--quick runs on CPU" in done.stderr


def test_quick_run_plans_through_the_package_when_the_cli_cannot_run(tmp_path):
    plugin = plans.default_plugin(rows.REPO_ROOT)
    if not os.path.isfile(plugin):
        pytest.skip(f"no plugin at {plugin}")
    broken = tmp_path / "fulcrum"
    broken.write_text("#!/bin/sh\necho 'error while loading shared libraries' >&2\nexit 127\n")
    broken.chmod(0o755)
    out = tmp_path / "out"
    env = dict(os.environ, FULCRUM_CLI=str(broken), FULCRUM_PLUGIN=plugin)
    done = run("--quick", "--out", str(out), "--cp", "2", "--block-size", "32", "--heads", "2",
               "--kv-heads", "1", "--head-dim", "8", "--reps", "1", "--warmup", "0",
               "--masks", "causal", "--rows", "quick_single_odd", env=env)
    assert done.returncode == 0, done.stderr
    text = (out / "summary.md").read_text()
    assert "plans from python/fulcrum over" in text and "does not run" in text
    summary = json.loads((out / "summary.json").read_text())
    assert {g["strategy"] for g in summary["groups"]} == set(plans.FULCRUM_STRATEGIES)


def write_params(path, tensors):
    import struct
    header = "".join(f"{name} {len(values)}\n" for name, values in tensors) + "\n"
    body = b"".join(struct.pack(f"<{len(v)}d", *v) for _, v in tensors)
    path.write_bytes(header.encode() + body)


def test_compare_params_reports_the_largest_difference(tmp_path):
    script = os.path.join(os.path.dirname(RUN), "compare_params.py")
    write_params(tmp_path / "a", [("w", [1.0, -4.0]), ("b", [0.5])])
    write_params(tmp_path / "b", [("w", [1.0, -4.0 + 3e-10]), ("b", [0.5])])
    done = subprocess.run([sys.executable, script, str(tmp_path / "a"), str(tmp_path / "b")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "largest |difference| 3.000e-10; largest |value| 4.000e+00" in done.stdout
    write_params(tmp_path / "c", [("w", [1.0, -4.0])])
    other = subprocess.run([sys.executable, script, str(tmp_path / "a"), str(tmp_path / "c")],
                           capture_output=True, text=True)
    assert other.returncode == 2 and "different parameters" in other.stderr
    (tmp_path / "d").write_bytes(b"w 2\n\n" + b"\0" * 8)
    short = subprocess.run([sys.executable, script, str(tmp_path / "a"), str(tmp_path / "d")],
                           capture_output=True, text=True)
    assert short.returncode == 2 and "bytes of values" in short.stderr


def test_a_spent_budget_still_writes_the_tables_and_says_where_it_stopped(cli, tmp_path):
    out = tmp_path / "out"
    done = run("--quick", "--out", str(out), "--cli", cli, "--cp", "2", "--block-size", "32",
               "--heads", "2", "--kv-heads", "1", "--head-dim", "8", "--reps", "1",
               "--warmup", "0", "--masks", "causal", "--budget-s", "0")
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped_early"].startswith("stopped at quick_packed_1k causal P=2")
    assert summary["groups"] == []
    assert "- incomplete: stopped at" in (out / "summary.md").read_text()


def fake_varlen(q, k, v, cu_q, cu_k, max_q, max_k):
    """What FlashAttention's varlen kernel computes, per sequence, with
    bottom-right causal alignment: plain PyTorch on the CPU."""
    outs = []
    for i in range(len(cu_q) - 1):
        qs, ks, vs = q[cu_q[i]:cu_q[i + 1]], k[cu_k[i]:cu_k[i + 1]], v[cu_k[i]:cu_k[i + 1]]
        nq, nk = qs.shape[0], ks.shape[0]
        assert nq <= max_q and nk <= max_k
        allowed = torch.arange(nk)[None, :] <= (nk - nq + torch.arange(nq))[:, None]
        scores = torch.einsum("qhd,khd->hqk", qs, ks) / qs.shape[-1] ** 0.5
        probs = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        outs.append(torch.einsum("hqk,khd->qhd", probs, vs))
    return torch.cat(outs)


def test_the_varlen_runner_matches_the_reference_with_a_faithful_kernel(cli, monkeypatch):
    """The gather, head expansion and scatter around the varlen kernel, with a
    CPU stand-in for the kernel, give the unsharded reference's answer."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_run", RUN)
    run_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_module)
    monkeypatch.setattr(kernels, "varlen_entry", lambda: fake_varlen)
    doc_lengths = [70, 9, 120, 41]
    mask = masks.MaskSpec("causal")
    positions, _ = plans.plan("per_document", doc_lengths, 3, mask, 16, cli)

    class Args:
        heads, kv_heads = 4, 2
    for rank in positions:
        row = rows.Row("t", doc_lengths, "test")
        runner = run_module.varlen_runner(rank, row, Args, "cpu")
        errors = kernels.reference_check(rank, doc_lengths, mask, 4, 2, 8, kernel=runner,
                                         dtype=torch.float32)
        assert max(errors.values()) < 1e-5, errors


def test_runs_merge_into_one_table_and_runs_of_other_shapes_do_not(cli, tmp_path):
    common = ["--quick", "--cli", cli, "--cp", "2", "--block-size", "32", "--kv-heads", "1",
              "--head-dim", "8", "--reps", "1", "--warmup", "0", "--masks", "causal"]
    for name, rows_arg, heads in (("a", "quick_single_512", "2"), ("b", "quick_single_odd", "2"),
                                  ("c", "quick_single_odd", "4")):
        done = run(*common, "--heads", heads, "--rows", rows_arg, "--out", str(tmp_path / name))
        assert done.returncode == 0, done.stderr
    merge = os.path.join(os.path.dirname(RUN), "merge.py")
    done = subprocess.run([sys.executable, merge, "--out", str(tmp_path / "ab"),
                           str(tmp_path / "a"), str(tmp_path / "b")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "ab" / "summary.json").read_text())
    assert {g["row"] for g in summary["groups"]} == {"quick_single_512", "quick_single_odd"}
    assert len(summary["runs"]) == 2
    assert "merged from 2 runs" in (tmp_path / "ab" / "summary.md").read_text()
    refused = subprocess.run([sys.executable, merge, "--out", str(tmp_path / "ac"),
                              str(tmp_path / "a"), str(tmp_path / "c")],
                             capture_output=True, text=True)
    assert refused.returncode == 2 and "differ in shape" in refused.stderr
