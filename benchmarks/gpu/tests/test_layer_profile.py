"""The layer profile's counting, fits and entry script on the CPU (the
timed run itself is the GPU's: docs/RESULTS_GPU.md section 6)."""

import json
import math
import os
import subprocess
import sys

import pytest

from gpubench import layer, model

torch = pytest.importorskip("torch")
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "layer_profile.py")


@pytest.mark.parametrize("length,block",
                         [(1, 128), (128, 128), (129, 128), (1000, 64), (4096, 128)])
def test_causal_tiles_count_the_blocks_a_causal_mask_touches(length, block):
    """Brute recount: a (query block, key block) pair is a tile when any query
    of the one may see any key of the other."""
    n = -(-length // block)
    touched = sum(1 for qb in range(n) for kb in range(n)
                  if kb * block <= min(length, (qb + 1) * block) - 1)
    assert layer.causal_tiles(length, block) == touched
    assert layer.rect_tiles(length, 3 * block + 1, block) == n * 4


def records_from(tile_ms, token_ms, const_ms, shape):
    out = [{"part": "linear", "tokens": t, "fwd_ms": token_ms * t / 3 + const_ms / 2,
            "bwd_ms": 2 * token_ms * t / 3 + const_ms / 2} for t in (100, 300, 900)]
    for length in (256, 512, 1024, 2048):
        tiles = layer.causal_tiles(length, shape["block"])
        out.append({"part": "attention", "backend": "flash", "causal": True, "queries": length,
                    "keys": length, "tiles": tiles, "fwd_ms": tile_ms * tiles * 0.3 + const_ms,
                    "bwd_ms": tile_ms * tiles * 0.7})
    out.append({"part": "attention", "backend": "flash", "causal": True, "queries": 4096,
                "keys": 4096, "tiles": 0, "error": "refused"})
    return out


def test_summary_recovers_the_coefficients_and_scales_them_by_layers():
    shape = dict(layer.SHAPE_7B, layers=5, block=64)
    summary = layer.summarise(records_from(2e-3, 5e-4, 0.25, shape), shape)
    assert summary["linear"]["slope_ms"] == pytest.approx(5e-4, rel=1e-9)
    assert summary["linear"]["const_ms"] == pytest.approx(0.25, rel=1e-9)
    assert summary["token_seconds"] == pytest.approx(5e-4 * 1e-3 * 5, rel=1e-9)
    flash = summary["attention"]["flash"]
    assert flash["causal"]["points"] == 4  # the refused shape is left out
    assert flash["tile_seconds"] == pytest.approx(2e-3 * 1e-3 * 5, rel=1e-9)
    assert flash["rho"] == pytest.approx(flash["tile_seconds"] / (64 * summary["token_seconds"]))
    assert flash["unmasked"]["points"] == 0 and flash["causal"]["largest_error"] < 1e-9


def test_quick_run_writes_a_profile_with_exactly_the_cost_profile_keys(tmp_path):
    done = subprocess.run([sys.executable, SCRIPT, "--quick", "--out", str(tmp_path), "--reps", "1",
                           "--warmup", "0"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    # A toy shape on a shared CPU: the figures are finite, their size is noise.
    assert math.isfinite(summary["token_seconds"])
    assert math.isfinite(summary["attention"]["math"]["tile_seconds"])
    text = (tmp_path / "profile-math.yaml").read_text()
    keys = [line.split(":")[0] for line in text.splitlines() if not line.startswith("#")]
    assert tuple(keys) == model.PROFILE_KEYS
    assert "not measured" in text
    assert len((tmp_path / "records.jsonl").read_text().splitlines()) == 3 + 4 + 3


@pytest.mark.parametrize("args", [["--reps", "0"], ["--budget-s", "nan"], ["--warmup", "-1"]])
def test_bad_options_are_refused_with_exit_2(tmp_path, args):
    done = subprocess.run([sys.executable, SCRIPT, "--quick", "--out", str(tmp_path)] + args,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.strip()


def test_an_out_that_is_not_a_folder_is_refused_before_any_timing(tmp_path):
    (tmp_path / "file").write_text("")
    for out in (tmp_path / "file", tmp_path / "file" / "below"):
        done = subprocess.run([sys.executable, SCRIPT, "--quick", "--out", str(out)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "--out" in done.stderr, done.stderr
        assert "part" not in done.stdout  # no record was timed


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_the_full_run_is_refused_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, SCRIPT, "--out", str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "--quick" in done.stderr


PROFILES = os.path.join(os.path.dirname(SCRIPT), "..", "..", "configs", "profiles")


@pytest.mark.parametrize("kernel", ["cudnn", "flash"])
def test_the_measured_profiles_load_and_keep_h100_7bs_other_fields(cli, kernel):
    """The committed files are valid profiles (the CLI prices a batch with
    them) whose only departures from h100_7b are the two measured figures."""
    path = os.path.join(PROFILES, f"h100_7b_{kernel}_measured.yaml")
    done = subprocess.run([cli, "schedule", "--world", "8", "--max-tokens-per-rank", "4096",
                           "--lengths", "9000,3000,500", "--profile", path, "--format", "json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    fields = dict(line.split(": ", 1) for line in open(path).read().splitlines()
                  if line and not line.startswith("#"))
    rest = {k: float(v) for k, v in fields.items() if k not in ("name", "tile_seconds",
                                                                "token_seconds")}
    sys.path.insert(0, os.path.join(PROFILES, "..", "..", "python"))
    from fulcrum.schedule import CostProfile  # the bundled h100_7b, as the C++ side has it
    h100_7b = CostProfile.bundled("h100_7b")
    assert rest == {k: float(getattr(h100_7b, k)) for k in rest}
    import layer_profile  # and the entry script's copy, which writes new files
    assert rest == {k: float(v) for k, v in layer_profile.H100_7B_REST.items()}
    assert float(fields["tile_seconds"]) != h100_7b.tile_seconds


def test_a_packed_row_counts_the_tiles_of_its_documents():
    shape = dict(layer.SHAPE_7B, block=64)
    timer = layer.Timer(torch, "cpu", 1, 0)
    record = layer.time_packed(torch, timer, shape, 960, 192, torch.float32)
    docs = 5
    assert record["docs"] == docs
    assert record["tiles"] == docs * sum(1 for qb in range(3) for kb in range(3) if kb <= qb)
    if "error" in record:  # a torch without the varlen kernel says so
        assert "fwd_ms" not in record
    with pytest.raises(ValueError, match="divisor"):
        layer.time_packed(torch, timer, shape, 1000, 192, torch.float32)


def test_short_rows_stay_out_of_the_fits_and_are_priced_against_the_slope():
    shape = dict(layer.SHAPE_7B, layers=5, block=64)
    records = records_from(2e-3, 5e-4, 0.25, shape)
    records.append({"part": "linear", "tokens": 10, "fwd_ms": 1.0, "bwd_ms": 2.0, "short": True})
    records.append({"part": "attention", "backend": "flash", "causal": True, "queries": 64,
                    "keys": 64, "tiles": 1, "fwd_ms": 0.5, "bwd_ms": 0.5, "short": True})
    summary = layer.summarise(records, shape)
    assert summary["linear"]["slope_ms"] == pytest.approx(5e-4, rel=1e-9)
    assert summary["attention"]["flash"]["causal"]["points"] == 4
    short = {e["kind"]: e for e in summary["short"]}
    assert short["linear"]["beyond_slope_ms"] == pytest.approx(3.0 - 10 * 5e-4)
    assert short["flash"]["beyond_slope_ms"] == pytest.approx(1.0 - 2e-3)
    assert short["flash"]["tokens"] == 64
