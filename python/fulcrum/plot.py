"""Pictures of plans and runs (matplotlib, Agg backend; PNG and SVG).

    python3 -m fulcrum.plot plan --cp 8 --seq-len 65536 --synthetic-docs 1 --out compare
    python3 -m fulcrum.plot plan --cp 8 --seq-len 65536 --synthetic-docs 1 --strategy auto --out tiles
    python3 -m fulcrum.plot run run.jsonl --out run

``plan`` without --strategy draws per-rank pairs and tiles for every strategy
of the plugin on one row; with --strategy it draws that plan's tile map, one
panel per rank (local query blocks x key blocks). ``run`` draws a training
run's metrics file (``fulcrum train --metrics``): loss, CP and DP imbalance
against the baselines the file records, and measured attention time per rank.
Every drawing function returns its Figure, so tests can read back what was
drawn.
"""

import os
import stat
import sys

import numpy as np

from . import _input_file
from . import work as work_model
from .balancer import load
from .errors import FulcrumError
from .plot_options import (build_parser, _check_options, _refuse_beyond_bounds, _row,
                           estimate_plot_plan, parse_length_list, read_length_file)
from .run_metrics import (MAX_BARS as _MAX_BARS, attention_ms_by_rank, cp_imbalance_by_step,
                          hybrid_attention_ms_by_rank, rank_busy_by_step, read_metrics,
                          read_run_metrics)
from .synthetic import random_docs, synthetic_document_lengths, synthetic_packed_row

_NO_MATPLOTLIB = ("drawing needs matplotlib, which is not installed; install it (Debian: "
                  "python3-matplotlib)")
try:
    import matplotlib
except ImportError:
    if __name__ == "__main__":
        print(f"fulcrum.plot: {_NO_MATPLOTLIB}", file=sys.stderr)
        sys.exit(2)
    raise FulcrumError("not_found", _NO_MATPLOTLIB) from None

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FORMATS = ("png", "svg")
_MAX_TILE_MAP_CELLS = 64 * 2**20
# Past these a picture is unreadable and matplotlib takes minutes and
# gigabytes to draw it: bars (ranks) in one panel (_MAX_BARS, from
# run_metrics), panels of a tile map, and pixels of a PNG.
_MAX_TILE_MAP_RANKS = 64
_MAX_PIXELS = 50_000_000
# Text from data (a strategy name, a file name) is drawn cut to this many
# characters: a megabyte of name overflows the rasterizer after a minute.
_MAX_LABEL = 60


def _label(text, limit=_MAX_LABEL):
    """Text from data as matplotlib draws it literally: at most ``limit``
    characters, one line, lone surrogates and control characters escaped
    (the SVG writer cannot encode a surrogate), and every '$' escaped, so
    that mathtext never parses a name such as '$x^$' (a ValueError) or
    '$\\undefined$'."""
    text = str(text)
    if len(text) > limit:
        text = text[:limit] + "..."
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    text = "".join(c if ord(c) >= 0x20 and ord(c) != 0x7F else f"\\x{ord(c):02x}" for c in text)
    return text.replace("$", "\\$")


# -- plans --------------------------------------------------------------------

def plan_compare_figure(plans, title=None):
    """Per-rank pairs and tiles of several plans of one row, each rank's work
    divided by the ideal share (pairs: total / P; tiles: unsharded tiles / P),
    so the tallest bar of a strategy is its pairs imbalance or its tiles over
    ideal. One group of P bars per strategy."""
    first = plans[0]
    if first.cp > _MAX_BARS:
        raise FulcrumError("invalid_argument", f"a comparison of {first.cp} ranks is too many "
                           f"bars to draw (at most {_MAX_BARS}); use a smaller --cp")
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
    names = [_label(p.requested) if p.used == p.requested
             else f"{_label(p.requested)}\n({_label(p.used)})" for p in plans]
    axes[1].set_xticks(range(len(plans)), names, fontsize=8)
    axes[0].set_title(title or _workload_title(first), fontsize=10)
    fig.text(0.01, 0.005, f"bars: ranks 0..{cp - 1}; tiles ideal = unsharded tiles / P; "
             "the label is the tallest bar", fontsize=7)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


def tile_map_figure(plan):
    """One panel per rank: the tiles (local query block, key block) its queries
    touch, as a tile-skipping kernel computes them."""
    if plan.cp > _MAX_TILE_MAP_RANKS:
        raise FulcrumError("invalid_argument", f"a tile map of {plan.cp} ranks is too many panels "
                           f"to draw (at most {_MAX_TILE_MAP_RANKS}); use a smaller --cp")
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
    fig.suptitle(f"{_label(plan.used)} tile map, {_workload_title(plan)}; tiles imbalance "
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


def run_figure(path):
    steps, micro, hybrid = read_run_metrics(path)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    step = [s["step"] for s in steps]

    ax = axes[0][0]
    ax.plot(step, [s["loss"] for s in steps], marker="o", label="loss", gid="loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("training loss", fontsize=10)

    ax = axes[0][1]
    if hybrid and not micro:
        busy = rank_busy_by_step(hybrid)
        ax.plot(busy["step"], busy["busy"], marker="o", markersize=3, label="measured slot time",
                gid="rank_busy")
        schedulers = sorted({h.get("scheduler", "?") for h in hybrid})
        ax.set_title(f"rank busy time (max / mean over ranks), "
                     f"{_label(', '.join(schedulers), 2 * _MAX_LABEL)}", fontsize=10)
    else:
        cp = cp_imbalance_by_step(micro)
        for key, style in (("tiles", "-"), ("pairs", "-"), ("contiguous_tiles", "--"),
                           ("contiguous_pairs", "--")):
            ax.plot(cp["step"], cp[key], style, marker="o", markersize=3,
                    label=key.replace("_", " "), gid=f"cp_{key}")
        strategies = sorted({m["cp_strategy"] for m in micro})
        ax.set_title(f"CP imbalance (max / mean over ranks), "
                     f"{_label(', '.join(strategies), 2 * _MAX_LABEL)}", fontsize=10)
    ax.set_xlabel("step")
    ax.legend(fontsize=8)

    ax = axes[1][0]
    ax.plot(step, [s["dp_imbalance"] for s in steps], marker="o",
            label=f"dp {_label(', '.join(sorted({s['dp_strategy'] for s in steps})))}", gid="dp")
    ax.plot(step, [s["dp_round_robin_imbalance"] for s in steps], "--", marker="o",
            label="round robin", gid="dp_round_robin")
    ax.set_title("DP imbalance (max / mean cost over DP ranks)", fontsize=10)
    ax.set_xlabel("step")
    ax.legend(fontsize=8)

    ax = axes[1][1]
    if hybrid and not micro:
        ms = hybrid_attention_ms_by_rank(hybrid)
        labels = [f"rank {r}" for r in range(ms.size)]
        layout = f"hybrid, {ms.size} ranks"
    else:
        grid = attention_ms_by_rank(micro)
        labels = [f"dp{d}\ncp{c}" for d in range(grid.shape[0]) for c in range(grid.shape[1])]
        layout = f"DP {grid.shape[0]} x CP {grid.shape[1]}"
        ms = grid.reshape(-1)
    ax.bar(range(ms.size), ms, color="tab:blue", gid="attention_ms")
    ax.set_xticks(range(ms.size), labels, fontsize=8)
    ax.set_ylabel("ms, summed over the run")
    ax.set_title("measured attention time per rank", fontsize=10)
    fig.suptitle(f"{_label(os.path.basename(path))}: {len(steps)} steps, {layout}", fontsize=10)
    fig.tight_layout()
    return fig


# -- command line -------------------------------------------------------------

def save(fig, prefix, formats=FORMATS, dpi=110):
    """Writes PREFIX.png / PREFIX.svg; returns the paths."""
    paths = []
    directory = os.path.dirname(prefix)
    if directory:
        os.makedirs(directory, exist_ok=True)
    width, height = (fig.get_size_inches() * dpi).round().astype(int)
    if "png" in formats and width * height > _MAX_PIXELS:
        plt.close(fig)
        raise FulcrumError("invalid_argument", f"the picture would be {width} x {height} pixels, "
                           f"more than {_MAX_PIXELS}; give a smaller --dpi")
    for fmt in formats:
        path = f"{prefix}.{fmt}"
        # A FIFO would block the write forever, a device would swallow it.
        try:
            mode = os.stat(path).st_mode
        except OSError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            raise FulcrumError("invalid_argument", f"--out {_input_file.shown(path)} "
                               f"{_input_file.kind_of(mode)}; give a prefix whose .{fmt} is a "
                               "new or regular file")
        fig.savefig(path, dpi=dpi if fmt == "png" else None,
                    metadata={"Date": None} if fmt == "svg" else {"Software": None})
        paths.append(path)
    plt.close(fig)
    return paths



def _plan_figure(args, formats):
    """The figure of ``plot plan``: every strategy compared, or one
    strategy's tile map; refused before planning past what can be drawn."""
    # Before planning: a plan for a million ranks takes minutes.
    if args.cp > _MAX_BARS:
        raise FulcrumError("invalid_argument",
                           f"--cp {args.cp} is too many bars to draw (at most "
                           f"{_MAX_BARS}); use a smaller --cp, or fulcrum plan "
                           "--compare for larger groups")
    if args.strategy and args.cp > _MAX_TILE_MAP_RANKS:
        raise FulcrumError("invalid_argument", f"a tile map of {args.cp} ranks is too "
                           f"many panels to draw (at most {_MAX_TILE_MAP_RANKS}); use a "
                           "smaller --cp")
    docs = _row(args)
    tokens = args.seq_len if docs is None else sum(docs)
    with load(args.plugin) as balancer:
        # Before planning: the row, the ranks and the pictures together.
        _refuse_beyond_bounds(tokens, docs, args.block_size, args.cp,
                              1 if args.strategy else len(balancer.cp_strategies),
                              bool(args.strategy), formats)

        def plan_one(name):
            return balancer.plan_cp(name, cp=args.cp, tokens=args.seq_len if docs is None
                                    else None, doc_lengths=docs,
                                    block_size=args.block_size, mask=args.mask)
        if args.strategy:
            return tile_map_figure(plan_one(args.strategy))
        return plan_compare_figure([plan_one(s) for s in balancer.cp_strategies])


def main(argv=None):
    args = build_parser(__doc__.split("\n\n")[0]).parse_args(argv)
    formats = [f for f in args.formats.split(",") if f]
    bad = [f for f in formats if f not in FORMATS]
    try:
        if bad:
            raise FulcrumError("invalid_argument",
                               f"--formats {args.formats!r}: use png, svg or png,svg")
        _check_options(args)
        if args.command == "run":
            fig = run_figure(args.metrics)
        else:
            fig = _plan_figure(args, len(formats))
        for path in save(fig, args.out, formats, args.dpi):
            # The bytes of the name, also where they are not UTF-8.
            sys.stdout.buffer.write(os.fsencode(path) + b"\n")
        sys.stdout.flush()
    except FulcrumError as error:
        print(f"fulcrum.plot: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        # Writing the pictures: a directory that cannot be made or written.
        where = _input_file.shown(error.filename) if error.filename is not None else args.out
        print(f"fulcrum.plot: cannot write --out {where}: {error.strerror or error}; give a "
              "prefix in a directory you can write", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 - whatever matplotlib raises, as one line
        # The inputs are checked before drawing; this is the last guard, so
        # that no failure reaches the user as a traceback.
        print(f"fulcrum.plot: drawing failed ({type(error).__name__}: "
              f"{_input_file.shown(str(error), 200)}); report it with the command and its "
              "input", file=sys.stderr)
        return 2
    return 0


__all__ = [
    "FORMATS", "attention_ms_by_rank", "cp_imbalance_by_step", "estimate_plot_plan",
    "hybrid_attention_ms_by_rank", "main", "parse_length_list", "plan_compare_figure",
    "random_docs", "rank_busy_by_step", "read_length_file", "read_metrics", "read_run_metrics",
    "run_figure", "save", "synthetic_document_lengths", "synthetic_packed_row", "tile_map_figure",
]

if __name__ == "__main__":
    sys.exit(main())
