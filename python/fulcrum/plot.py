"""Pictures of plans and runs (matplotlib, Agg backend; PNG and SVG).

    python3 -m fulcrum.plot plan --cp 8 --seq-len 65536 --random-docs 1 --out compare
    python3 -m fulcrum.plot plan --cp 8 --seq-len 65536 --random-docs 1 --strategy auto --out tiles
    python3 -m fulcrum.plot run run.jsonl --out run

``plan`` without --strategy draws per-rank pairs and tiles for every strategy
of the plugin on one row; with --strategy it draws that plan's tile map, one
panel per rank (local query blocks x key blocks). ``run`` draws a training
run's metrics file (``fulcrum train --metrics``): loss, CP and DP imbalance
against the baselines the file records, and measured attention time per rank.
Every drawing function returns its Figure, so tests can read back what was
drawn.
"""

import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from . import work as work_model  # noqa: E402
from .balancer import load  # noqa: E402
from .errors import FulcrumError  # noqa: E402

FORMATS = ("png", "svg")
_MAX_TILE_MAP_CELLS = 64 * 2**20
# A plan figure draws one bar (or one tile-map panel) per rank: past this many
# ranks matplotlib takes minutes and gigabytes for a picture nobody can read.
_MAX_PLOT_RANKS = 128


# -- plans --------------------------------------------------------------------

def plan_compare_figure(plans, title=None):
    """Per-rank pairs and tiles of several plans of one row, each rank's work
    divided by the ideal share (pairs: total / P; tiles: unsharded tiles / P),
    so the tallest bar of a strategy is its pairs imbalance or its tiles over
    ideal. One group of P bars per strategy."""
    first = plans[0]
    cp = first.cp
    ideal_pairs = first.rank_pairs.sum() / cp
    ideal_tiles = work_model.unsharded_tiles(first.tokens, _docs(first), first.block_size,
                                             first.mask) / cp
    fig, axes = plt.subplots(2, 1, figsize=(max(8, 1.1 * len(plans) + 2), 6.5), sharex=True)
    width = 0.8 / cp
    colors = plt.get_cmap("viridis")(np.linspace(0.1, 0.9, cp))
    for ax, what, ideal in ((axes[0], "pairs", ideal_pairs), (axes[1], "tiles", ideal_tiles)):
        for s, plan in enumerate(plans):
            values = (plan.rank_pairs if what == "pairs" else plan.rank_tiles) / ideal
            x = s - 0.4 + width * (np.arange(cp) + 0.5)
            ax.bar(x, values, width=width, color=colors, label=None, gid=f"{plan.requested}")
            top = values.max()
            ax.text(s, top * 1.02, f"{top:.2f}", ha="center", va="bottom", fontsize=8)
        ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
        ax.set_ylabel(f"{what} / ideal")
        ax.set_ylim(0, max(1.2, ax.get_ylim()[1] * 1.08))
    names = [p.requested if p.used == p.requested else f"{p.requested}\n({p.used})"
             for p in plans]
    axes[1].set_xticks(range(len(plans)), names, fontsize=8)
    axes[0].set_title(title or _workload_title(first), fontsize=10)
    fig.text(0.01, 0.005, f"bars: ranks 0..{cp - 1}; tiles ideal = unsharded tiles / P; "
             "the label is the tallest bar", fontsize=7)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


def tile_map_figure(plan):
    """One panel per rank: the tiles (local query block, key block) its queries
    touch, as a tile-skipping kernel computes them."""
    cells = plan.cp * -(-plan.shard_len // plan.block_size) * -(-plan.tokens // plan.block_size)
    if cells > _MAX_TILE_MAP_CELLS:
        raise FulcrumError("invalid_argument",
                           f"a tile map of {cells} tiles is too large to draw (at most "
                           f"{_MAX_TILE_MAP_CELLS}); use a larger --block-size or a shorter row")
    maps = work_model.tile_map(plan.positions, plan.tokens, _docs(plan), plan.block_size,
                               plan.mask)
    cols = min(plan.cp, 4)
    rows = -(-plan.cp // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows + 0.6), squeeze=False)
    for r in range(rows * cols):
        ax = axes[r // cols][r % cols]
        if r >= plan.cp:
            ax.axis("off")
            continue
        ax.imshow(maps[r], aspect="auto", interpolation="nearest", cmap="Greys", vmin=0, vmax=1)
        ax.set_title(f"rank {r}: {int(plan.rank_tiles[r])} tiles", fontsize=9)
        ax.set_xlabel("key block", fontsize=8)
        ax.set_ylabel("local query block", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle(f"{plan.used} tile map, {_workload_title(plan)}; tiles imbalance "
                 f"{plan.imbalance.tiles:.3f}, over ideal {plan.tiles_over_ideal:.3f}", fontsize=10)
    fig.tight_layout()
    return fig


def _docs(plan):
    return plan.doc_lengths


def _workload_title(plan):
    docs = _docs(plan)
    ndocs = 1 if docs is None else len(docs)
    return (f"{plan.tokens} tokens in {ndocs} document{'s' if ndocs != 1 else ''}, "
            f"mask {plan.mask}, cp {plan.cp}, block {plan.block_size}")


# -- runs ---------------------------------------------------------------------

def read_metrics(path):
    """(step records, micro-batch records) of a ``fulcrum train --metrics`` file."""
    steps, micro = [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise FulcrumError("invalid_argument",
                                   f"{path}:{number}: not a JSON line ({error.msg}); give the "
                                   "file fulcrum train --metrics wrote") from None
            (micro if "microbatch" in record else steps).append(record)
    if not steps:
        raise FulcrumError("invalid_argument", f"{path} has no step records (lines with "
                           "'loss'); give the file fulcrum train --metrics wrote")
    return steps, micro


def cp_imbalance_by_step(micro):
    """Per step: sum over its micro-batches of the max over CP ranks, over the
    sum of the means (as the run summary states it), for pairs, tiles and the
    contiguous baseline's pairs and tiles. The baseline comes as imbalance
    ratios in the file, so it is weighted by each micro-batch's mean."""
    out = {}
    for m in micro:
        acc = out.setdefault(m["step"], np.zeros(6))
        for i, key in enumerate(("pairs", "tiles")):
            values = np.asarray(m[key], dtype=np.float64)
            mean = values.mean() if values.size else 0.0
            acc[2 * i] += values.max() if values.size else 0.0
            acc[2 * i + 1] += mean
            acc[4 + i] += m["contiguous_imbalance"][key] * mean
    steps = sorted(out)
    table = np.array([out[s] for s in steps]) if steps else np.zeros((0, 6))

    def ratio(top, mean):
        return np.where(mean > 0, top / np.where(mean > 0, mean, 1), 1.0)

    return {
        "step": np.array(steps),
        "pairs": ratio(table[:, 0], table[:, 1]),
        "tiles": ratio(table[:, 2], table[:, 3]),
        "contiguous_pairs": ratio(table[:, 4], table[:, 1]),
        "contiguous_tiles": ratio(table[:, 5], table[:, 3]),
    }


def attention_ms_by_rank(micro):
    """Measured attention time summed over the run, per (dp_rank, cp_rank)."""
    dp = 1 + max((m["dp_rank"] for m in micro), default=0)
    cp = max((len(m["attention_ms"]) for m in micro), default=0)
    total = np.zeros((dp, cp))
    for m in micro:
        for c, ms in enumerate(m["attention_ms"]):
            if ms is not None:
                total[m["dp_rank"], c] += ms
    return total


def run_figure(path):
    steps, micro = read_metrics(path)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    step = [s["step"] for s in steps]

    ax = axes[0][0]
    ax.plot(step, [s["loss"] for s in steps], marker="o", label="loss", gid="loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("training loss", fontsize=10)

    ax = axes[0][1]
    cp = cp_imbalance_by_step(micro)
    for key, style in (("tiles", "-"), ("pairs", "-"), ("contiguous_tiles", "--"),
                       ("contiguous_pairs", "--")):
        ax.plot(cp["step"], cp[key], style, marker="o", markersize=3, label=key.replace("_", " "),
                gid=f"cp_{key}")
    strategies = sorted({m["cp_strategy"] for m in micro})
    ax.set_title(f"CP imbalance (max / mean over ranks), {', '.join(strategies)}", fontsize=10)
    ax.set_xlabel("step")
    ax.legend(fontsize=8)

    ax = axes[1][0]
    ax.plot(step, [s["dp_imbalance"] for s in steps], marker="o",
            label=f"dp {', '.join(sorted({s['dp_strategy'] for s in steps}))}", gid="dp")
    ax.plot(step, [s["dp_round_robin_imbalance"] for s in steps], "--", marker="o",
            label="round robin", gid="dp_round_robin")
    ax.set_title("DP imbalance (max / mean cost over DP ranks)", fontsize=10)
    ax.set_xlabel("step")
    ax.legend(fontsize=8)

    ax = axes[1][1]
    ms = attention_ms_by_rank(micro)
    labels = [f"dp{d}\ncp{c}" for d in range(ms.shape[0]) for c in range(ms.shape[1])]
    ax.bar(range(ms.size), ms.reshape(-1), color="tab:blue", gid="attention_ms")
    ax.set_xticks(range(ms.size), labels, fontsize=8)
    ax.set_ylabel("ms, summed over the run")
    ax.set_title("measured attention time per rank", fontsize=10)
    fig.suptitle(f"{os.path.basename(path)}: {len(steps)} steps, DP {ms.shape[0]} x CP "
                 f"{ms.shape[1]}", fontsize=10)
    fig.tight_layout()
    return fig


# -- command line -------------------------------------------------------------

def save(fig, prefix, formats=FORMATS, dpi=110):
    """Writes PREFIX.png / PREFIX.svg; returns the paths."""
    paths = []
    directory = os.path.dirname(prefix)
    if directory:
        os.makedirs(directory, exist_ok=True)
    for fmt in formats:
        path = f"{prefix}.{fmt}"
        fig.savefig(path, dpi=dpi if fmt == "png" else None,
                    metadata={"Date": None} if fmt == "svg" else {"Software": None})
        paths.append(path)
    plt.close(fig)
    return paths


def random_docs(tokens, seed):
    """A seeded packed row: log-normal document lengths (median ~1.6K tokens,
    a long tail), the last one cut to fill the row exactly. The plot's own
    mix, not the C++ CLI's --synthetic-docs."""
    rng = np.random.default_rng(seed)
    docs, left = [], tokens
    while left > 0:
        length = int(min(left, max(1, rng.lognormal(7.4, 1.3))))
        docs.append(length)
        left -= length
    return docs


def _row(args):
    if args.doc_lengths_file:
        with open(args.doc_lengths_file, encoding="utf-8") as f:
            return json.load(f)
    if args.doc_lengths:
        return [int(x) for x in args.doc_lengths.split(",")]
    if args.random_docs is not None:
        return random_docs(args.seq_len, args.random_docs)
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m fulcrum.plot", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    plan = sub.add_parser("plan", help="per-rank work of every strategy, or one plan's tile map")
    plan.add_argument("--plugin", default="fulcrum_balancer", help="plugin name or path")
    plan.add_argument("--cp", type=int, required=True)
    plan.add_argument("--seq-len", type=int)
    plan.add_argument("--random-docs", type=int, metavar="SEED",
                      help="fill --seq-len with seeded packed documents")
    plan.add_argument("--doc-lengths", metavar="a,b,c")
    plan.add_argument("--doc-lengths-file", metavar="F.json")
    plan.add_argument("--block-size", type=int, default=128)
    plan.add_argument("--mask", default="causal")
    plan.add_argument("--strategy", help="draw this plan's tile map instead of comparing")
    plan.add_argument("--out", required=True, help="output prefix: PREFIX.png, PREFIX.svg")
    plan.add_argument("--formats", default="png,svg")
    plan.add_argument("--dpi", type=int, default=110, help="PNG resolution")
    run = sub.add_parser("run", help="a training run's metrics file")
    run.add_argument("metrics", help="the JSONL file of fulcrum train --metrics")
    run.add_argument("--out", required=True, help="output prefix: PREFIX.png, PREFIX.svg")
    run.add_argument("--formats", default="png,svg")
    run.add_argument("--dpi", type=int, default=110, help="PNG resolution")
    args = parser.parse_args(argv)
    formats = [f for f in args.formats.split(",") if f]
    bad = [f for f in formats if f not in FORMATS]
    try:
        if bad:
            raise FulcrumError("invalid_argument",
                               f"--formats {args.formats!r}: use png, svg or png,svg")
        if args.command == "run":
            fig = run_figure(args.metrics)
        else:
            if args.cp > _MAX_PLOT_RANKS:
                raise FulcrumError("invalid_argument",
                                   f"--cp {args.cp}: a plan figure draws every rank, at most "
                                   f"{_MAX_PLOT_RANKS}; use fulcrum plan --compare for larger "
                                   "groups")
            docs = _row(args)
            if docs is None and args.seq_len is None:
                raise FulcrumError("invalid_argument", "no row given; give --seq-len N (with "
                                   "--random-docs SEED), --doc-lengths or --doc-lengths-file")
            with load(args.plugin) as balancer:
                def plan_one(name):
                    return balancer.plan_cp(name, cp=args.cp, tokens=args.seq_len if docs is None
                                            else None, doc_lengths=docs,
                                            block_size=args.block_size, mask=args.mask)
                if args.strategy:
                    fig = tile_map_figure(plan_one(args.strategy))
                else:
                    fig = plan_compare_figure([plan_one(s) for s in balancer.cp_strategies])
        for path in save(fig, args.out, formats, args.dpi):
            print(path)
    except (FulcrumError, OSError, ValueError, KeyError) as error:
        what = error if isinstance(error, FulcrumError) else f"{type(error).__name__}: {error}"
        print(f"fulcrum.plot: {what}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
