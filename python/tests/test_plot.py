"""Pictures drawn from real outputs, read back: the bars, images and lines a
figure holds are the figures of the plans and the metrics file."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="python3-matplotlib is not installed")
from fulcrum import plot, work  # noqa: E402

from cli import run_json  # noqa: E402

DATA = pathlib.Path(__file__).parent / "data"
# A metrics file written by `fulcrum train --config configs/synthetic.yaml
# --metrics FILE` (DP 2 x CP 2, 10 steps; the quickstart before it trained on
# text).
QUICKSTART_METRICS = DATA / "quickstart_metrics.jsonl"


def bar_heights(ax):
    return np.array([p.get_height() for p in ax.patches])


def test_compare_bars_are_the_plans_work(balancer, cli_path, plugin_path, tmp_path):
    docs = plot.random_docs(16384, 3)
    plans = [balancer.plan_cp(s, cp=4, doc_lengths=docs, block_size=64)
             for s in balancer.cp_strategies]
    fig = plot.plan_compare_figure(plans)
    pairs_ax, tiles_ax = fig.axes
    pairs = bar_heights(pairs_ax).reshape(len(plans), 4)
    tiles = bar_heights(tiles_ax).reshape(len(plans), 4)
    ideal_tiles = work.unsharded_tiles(16384, docs, 64, "causal") / 4
    for s, plan in enumerate(plans):
        assert np.allclose(pairs[s], plan.rank_pairs / (plan.rank_pairs.sum() / 4))
        assert np.allclose(tiles[s], plan.rank_tiles / ideal_tiles)
    # The tallest bars are the CLI's figures for the same row.
    row = tmp_path / "row.json"
    row.write_text(json.dumps(docs))
    cli = run_json(cli_path, "plan", "--compare", "--cp", 4, "--block-size", 64,
                   "--doc-lengths-file", row, plugin=plugin_path)["strategies"]
    assert [c["requested"] for c in cli] == [p.requested for p in plans]
    assert np.allclose(pairs.max(axis=1), [c["imbalance"]["pairs"] for c in cli])
    assert np.allclose(tiles.max(axis=1), [c["tiles_over_ideal"] for c in cli])
    paths = plot.save(fig, str(tmp_path / "compare"))
    check_files(paths)


@pytest.mark.parametrize("strategy,mask", [("auto", "causal"), ("head_tail", "sliding:300"),
                                           ("striped", "prefix:100"), ("per_document", "full")])
def test_tile_map_holds_each_ranks_tiles(strategy, mask, balancer, figureless_balancer):
    docs = plot.random_docs(6000, 5)
    plan = balancer.plan_cp(strategy, cp=3, doc_lengths=docs, block_size=32, mask=mask)
    fig = plot.tile_map_figure(plan)
    images = [ax.images[0].get_array() for ax in fig.axes if ax.images]
    assert len(images) == plan.cp
    assert [int(np.asarray(img).sum()) for img in images] == plan.rank_tiles.tolist()
    assert all(np.asarray(img).shape == (-(-plan.shard_len // 32), -(-6000 // 32)) for img in images)
    # And the map agrees with the figures the package computes itself.
    own = figureless_balancer.plan_cp(strategy, cp=3, doc_lengths=docs, block_size=32, mask=mask)
    maps = work.tile_map(own.positions, 6000, docs, 32, mask)
    assert maps.sum(axis=(1, 2)).tolist() == own.rank_tiles.tolist()


def expected_run_figures(path):
    """The figures of a metrics file, recounted from its JSON here."""
    records = [json.loads(line) for line in open(path) if line.strip()]
    steps = [r for r in records if "loss" in r]
    micro = [r for r in records if "microbatch" in r]
    cp = {}
    for m in micro:
        top_mean = cp.setdefault(m["step"], [0.0, 0.0, 0.0])
        top_mean[0] += max(m["tiles"])
        top_mean[1] += sum(m["tiles"]) / len(m["tiles"])
        top_mean[2] += m["contiguous_imbalance"]["tiles"] * sum(m["tiles"]) / len(m["tiles"])
    cp_size = len(micro[0]["attention_ms"])
    dp_size = 1 + max(m["dp_rank"] for m in micro)
    ms = [0.0] * (cp_size * dp_size)
    for m in micro:
        for c, t in enumerate(m["attention_ms"]):
            ms[m["dp_rank"] * cp_size + c] += t
    return {
        "loss": [s["loss"] for s in steps],
        "dp": [s["dp_imbalance"] for s in steps],
        "dp_round_robin": [s["dp_round_robin_imbalance"] for s in steps],
        "cp_tiles": [cp[k][0] / cp[k][1] for k in sorted(cp)],
        "cp_contiguous_tiles": [cp[k][2] / cp[k][1] for k in sorted(cp)],
        "attention_ms": ms,
    }


def check_run_figure(fig, path):
    want = expected_run_figures(path)
    lines = {line.get_gid(): np.asarray(line.get_ydata()) for ax in fig.axes for line in ax.lines
             if line.get_gid()}
    for key in ("loss", "dp", "dp_round_robin", "cp_tiles", "cp_contiguous_tiles"):
        assert np.allclose(lines[key], want[key]), key
    bars = [ax for ax in fig.axes if ax.patches][0]
    assert np.allclose(bar_heights(bars), want["attention_ms"])
    assert len(want["loss"]) > 1 and max(want["dp_round_robin"]) > 1.0  # a real, unbalanced run


def test_tile_map_figure_bounds_its_tiles_for_library_callers(balancer):
    """The command refuses a large map from its estimate before planning; a
    caller of tile_map_figure with a plan in hand is refused by the count of
    tiles, before the map is computed."""
    plan = balancer.plan_cp("contiguous", cp=2, tokens=65536, block_size=1)
    with pytest.raises(plot.FulcrumError, match="a tile map of 4294967296 tiles is too large"):
        plot.tile_map_figure(plan)


@pytest.mark.parametrize("cp,tokens,block,strategies,tile_map,formats", [
    (8, 1 << 20, 128, 8, False, 2), (128, 1 << 22, 128, 8, False, 2),
    (8, 1 << 22, 4096, 1, True, 1), (64, 1 << 16, 128, 1, True, 2),
])
def test_the_estimate_grows_with_every_dimension(cp, tokens, block, strategies, tile_map,
                                                  formats):
    """Property: doubling the row, the ranks, the strategies or the formats,
    or halving the block, never lowers the estimate (so a refused input
    stays refused when any of them grows)."""
    def estimate(**changes):
        args = dict(tokens=tokens, doc_lengths=None, block_size=block, cp=cp,
                    strategies=strategies, tile_map=tile_map, formats=formats)
        args.update(changes)
        return plot.estimate_plot_plan(**args)[1:]

    base = estimate()
    for grown in (estimate(tokens=2 * tokens), estimate(cp=2 * cp),
                  estimate(block_size=max(1, block // 2)), estimate(formats=2 * formats),
                  estimate(strategies=2 * strategies)):
        assert grown[0] >= base[0] and grown[1] >= base[1], (base, grown)


def test_run_figure_of_a_real_metrics_file(tmp_path):
    fig = plot.run_figure(str(QUICKSTART_METRICS))
    check_run_figure(fig, QUICKSTART_METRICS)
    check_files(plot.save(fig, str(tmp_path / "run")))


def test_run_figure_of_a_fresh_training_run(cli_path, plugin_path, tmp_path):
    config = pathlib.Path(__file__).parents[2] / "configs" / "synthetic.yaml"
    metrics = tmp_path / "run.jsonl"
    done = subprocess.run([str(cli_path), "train", "--config", str(config), "--set",
                           "train.steps=3", "--metrics", str(metrics)],
                          capture_output=True, text=True, timeout=300)
    if done.returncode == 2 and "without LibTorch" in done.stderr:
        pytest.skip("this fulcrum was built without LibTorch: no `fulcrum train` to make metrics")
    assert done.returncode == 0, done.stderr[-2000:]
    check_run_figure(plot.run_figure(str(metrics)), metrics)


# A metrics file written by `fulcrum train --config configs/hybrid.yaml
# --set train.steps=3 --metrics FILE` (4 ranks, hybrid mode: one schedule
# record per step instead of micro-batch records).
HYBRID_METRICS = DATA / "hybrid_metrics.jsonl"


def test_run_figure_of_a_hybrid_metrics_file(tmp_path):
    records = [json.loads(line) for line in open(HYBRID_METRICS) if line.strip()]
    steps = [r for r in records if "loss" in r]
    schedules = [r for r in records if "scheduler" in r]
    assert steps and schedules and not any("microbatch" in r for r in records)
    fig = plot.run_figure(str(HYBRID_METRICS))
    lines = {line.get_gid(): np.asarray(line.get_ydata()) for ax in fig.axes for line in ax.lines
             if line.get_gid()}
    assert np.allclose(lines["loss"], [s["loss"] for s in steps])
    assert np.allclose(lines["dp"], [s["dp_imbalance"] for s in steps])
    busy = [max(r["busy_ms"] for r in h["ranks"]) /
            (sum(r["busy_ms"] for r in h["ranks"]) / len(h["ranks"])) for h in schedules]
    assert np.allclose(lines["rank_busy"], busy)
    world = len(schedules[0]["ranks"])
    ms = [sum(r["attention_ms"] for h in schedules for r in h["ranks"] if r["rank"] == k)
          for k in range(world)]
    bars = [ax for ax in fig.axes if ax.patches][0]
    assert np.allclose(bar_heights(bars), ms) and min(ms) > 0
    check_files(plot.save(fig, str(tmp_path / "hybrid")))
    # The command line draws it too.
    done = subprocess.run([sys.executable, "-m", "fulcrum.plot", "run", str(HYBRID_METRICS),
                           "--out", str(tmp_path / "cli")], capture_output=True, text=True,
                          timeout=120, cwd=pathlib.Path(plot.__file__).parents[1])
    assert done.returncode == 0, done.stderr
    check_files([str(tmp_path / "cli.png"), str(tmp_path / "cli.svg")])


def check_files(paths):
    assert sorted(p.rsplit(".", 1)[1] for p in paths) == ["png", "svg"]
    for path in paths:
        data = pathlib.Path(path).read_bytes()
        if path.endswith(".png"):
            assert data.startswith(b"\x89PNG") and len(data) > 10_000
        else:
            assert b"<svg" in data and data.count(b"<path") > 20


@pytest.mark.parametrize("tokens,seed", [(8192, 1), (65536, 1), (131072, 7), (5000, 2**64 - 1)])
def test_synthetic_docs_are_the_clis_row(cli_path, plugin_path, tmp_path, tokens, seed):
    """--synthetic-docs (and its earlier name --random-docs) draws the row
    `fulcrum plan --synthetic-docs` draws from the same seed: the CLI plans
    the plotter's row exactly as its own, per rank, for two strategies."""
    docs = plot.synthetic_packed_row(tokens, seed)
    assert plot.random_docs(tokens, seed) == docs and sum(docs) == tokens and len(docs) > 1
    row = tmp_path / "row.json"
    row.write_text(json.dumps(docs))
    for strategy in ("contiguous", "per_document"):
        own = run_json(cli_path, "plan", "--cp", 4, "--strategy", strategy, "--seq-len", tokens,
                       "--synthetic-docs", seed, plugin=plugin_path)
        given = run_json(cli_path, "plan", "--cp", 4, "--strategy", strategy,
                         "--doc-lengths-file", row, plugin=plugin_path)
        for plan in (own, given):
            plan.pop("plan_time_us")
        assert own == given, strategy
    # A different row does not plan the same (the comparison can fail).
    other = tmp_path / "other.json"
    other.write_text(json.dumps(docs[1:] + docs[:1]))
    assert run_json(cli_path, "plan", "--cp", 4, "--strategy", "per_document",
                    "--doc-lengths-file", other, plugin=plugin_path)["ranks"] != own["ranks"]


def test_command_line(plugin_path, tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "fulcrum.plot", *map(str, args)],
                              capture_output=True, text=True, timeout=300,
                              cwd=pathlib.Path(plot.__file__).parents[1])
    done = run("plan", "--plugin", plugin_path, "--cp", 4, "--seq-len", 8192, "--random-docs", 1,
               "--block-size", 64, "--out", tmp_path / "cmp")  # the earlier name still works
    assert done.returncode == 0, done.stderr
    check_files(done.stdout.split())
    done = run("plan", "--plugin", plugin_path, "--cp", 4, "--seq-len", 8192, "--strategy",
               "balanced", "--formats", "png", "--out", tmp_path / "map")
    assert done.returncode == 0 and done.stdout.split() == [f"{tmp_path}/map.png"], done.stderr
    done = run("run", QUICKSTART_METRICS, "--out", tmp_path / "run")
    assert done.returncode == 0, done.stderr
    check_files(done.stdout.split())
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 1\n')
    for args, words in [
        (("run", bad, "--out", tmp_path / "x"), "bad.jsonl' line 1: not a JSON line"),
        (("run", tmp_path / "none.jsonl", "--out", tmp_path / "x"), "does not exist"),
        (("plan", "--plugin", plugin_path, "--cp", 0, "--seq-len", 64, "--out", tmp_path / "x"),
         "--cp must be an integer from 1 to 1048576, got '0'"),
        (("plan", "--plugin", plugin_path, "--cp", 2, "--seq-len", 65536, "--block-size", 1,
          "--strategy", "contiguous", "--out", tmp_path / "x"),
         "(65536 blocks of 1) on 2 ranks as a tile map would take about"),
        (("plan", "--plugin", plugin_path, "--cp", 1048576, "--seq-len", 1048576, "--out",
          tmp_path / "x"), "--cp 1048576 is too many bars to draw (at most 1024)"),
        (("plan", "--plugin", tmp_path / "libno.so", "--cp", 2, "--seq-len", 64, "--out",
          tmp_path / "x"), "does not exist"),
    ]:
        done = run(*args)
        assert done.returncode == 2 and words in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize("flag", ["--lengths", "--doc-lengths", "--lengths-file",
                                  "--doc-lengths-file"])
def test_row_flags_take_the_clis_names_and_the_earlier_ones(flag, plugin_path, tmp_path):
    """plan's row is --lengths / --lengths-file, as in fulcrum dp-partition and
    schedule; --doc-lengths / --doc-lengths-file are their earlier names."""
    row = tmp_path / "row.json"
    row.write_text("[3000, 1000, 96]")
    value = str(row) if flag.endswith("-file") else "3000,1000,96"
    assert plot.main(["plan", "--plugin", str(plugin_path), "--cp", "2", "--block-size", "64",
                      flag, value, "--formats", "svg", "--out", str(tmp_path / "p")]) in (0, None)
    assert (tmp_path / "p.svg").read_bytes().count(b"<path") > 20
