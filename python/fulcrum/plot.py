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

import argparse
import json
import math
import os
import stat
import sys

import numpy as np

from . import _input_file
from . import work as work_model
from .balancer import load
from .errors import FulcrumError

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
# gigabytes to draw it: bars (ranks) in one panel, panels of a tile map, and
# pixels of a PNG.
_MAX_BARS = 1024
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


# -- runs ---------------------------------------------------------------------

# A metrics file is one JSON record per line; a run of a million steps is far
# under this. Lines nest two deep; the bound is the C++ JSONL reader's.
_MAX_METRICS_BYTES = 1 << 30
_MAX_METRICS_DEPTH = 64
# Ranks a metrics file may name, as the C++ side's largest group.
_MAX_RANKS = 1 << 20
_METRICS_FIX = "give the file fulcrum train --metrics wrote"


def read_metrics(path):
    """(step records, micro-batch records) of a ``fulcrum train --metrics``
    file, read with the C++ readers' rules (a regular file, at most 1 GiB,
    lines nested at most 64 deep) and every field the pictures use checked,
    so that a damaged file is refused naming its line instead of failing
    inside matplotlib. A hybrid-mode file has no micro-batch records; its
    schedule records come from read_run_metrics."""
    steps, micro, _ = read_run_metrics(path)
    return steps, micro


def read_run_metrics(path):
    """(step records, micro-batch records, hybrid schedule records) of a
    metrics file: fixed mode writes micro-batch records, hybrid mode one
    schedule record per step (``scheduler``, ``ranks``) instead."""
    rules = _input_file.InputRules(f"metrics file {_input_file.shown(path)}", _METRICS_FIX,
                                   _MAX_METRICS_BYTES)
    text = _input_file.read_input_file(path, rules)
    steps, micro, hybrid = [], [], []
    for number, line in enumerate(text.split(b"\n"), 1):
        if not line.strip():
            continue
        where = f"{rules.what} line {number}"
        within, at = _input_file.json_nesting_within(line, _MAX_METRICS_DEPTH)
        if not within:
            raise FulcrumError("invalid_argument", f"{where} nests lists or objects more than "
                               f"{_MAX_METRICS_DEPTH} deep at byte {at}; {_METRICS_FIX}")
        try:
            record = json.loads(line.decode("utf-8"), parse_constant=_no_constant)
        except UnicodeDecodeError as error:
            raise FulcrumError("invalid_argument", f"{where} is not UTF-8 text (byte "
                               f"{error.start}); {_METRICS_FIX}") from None
        except (ValueError, RecursionError) as error:
            reason = error.msg if isinstance(error, json.JSONDecodeError) else str(error)
            raise FulcrumError("invalid_argument", f"{where}: not a JSON line ({reason}); "
                               f"{_METRICS_FIX}") from None
        if not isinstance(record, dict):
            raise FulcrumError("invalid_argument", f"{where} holds a JSON "
                               f"{type(record).__name__}, not a record; {_METRICS_FIX}")
        if "microbatch" in record:
            micro.append(_micro_record(record, where))
        elif "scheduler" in record:
            hybrid.append(_hybrid_record(record, where))
        else:
            steps.append(_step_record(record, where))
    if not steps:
        raise FulcrumError("invalid_argument", f"{rules.what} has no step records (lines with "
                           f"'loss'); {_METRICS_FIX}")
    return steps, micro, hybrid


class _NotJson(ValueError):
    pass


def _no_constant(name):
    """NaN and Infinity are Python's extension of JSON, not JSON."""
    raise _NotJson(f"{name} is not a JSON number")


def _field(record, key, where, check, expected):
    if key not in record:
        raise FulcrumError("invalid_argument", f"{where} has no {key!r}; {_METRICS_FIX}")
    value = record[key]
    if not check(value):
        raise FulcrumError("invalid_argument", f"{where}: {key} is "
                           f"{_input_file.shown(value, 60)}, not {expected}; {_METRICS_FIX}")
    return value


def _is_int(value, low=0, high=2**63 - 1):
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


# Numbers past this are no loss, time or count a run writes (the most pairs
# of one rank, of the longest row, are under 2^61), and near 1e308 the axis
# arithmetic overflows; JSON's 1e999 reads as infinity.
_MAX_MAGNITUDE = 1e30
_NUMBER = "a finite number within +-1e30"


def _is_number(value):
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and abs(value) <= _MAX_MAGNITUDE)


def _is_numbers(value, nullable=False):
    return (isinstance(value, list) and len(value) <= _MAX_RANKS
            and all(_is_number(v) or (nullable and v is None) for v in value))


def _step_record(record, where):
    _field(record, "step", where, _is_int, "a step number")
    _field(record, "loss", where, _is_number, _NUMBER)
    _field(record, "dp_imbalance", where, _is_number, _NUMBER)
    _field(record, "dp_round_robin_imbalance", where, _is_number, _NUMBER)
    _field(record, "dp_strategy", where, lambda v: isinstance(v, str), "a strategy name")
    return record


def _micro_record(record, where):
    _field(record, "step", where, _is_int, "a step number")
    _field(record, "dp_rank", where, lambda v: _is_int(v, 0, _MAX_RANKS - 1),
           f"a rank in [0, {_MAX_RANKS})")
    _field(record, "cp_strategy", where, lambda v: isinstance(v, str), "a strategy name")
    for key in ("pairs", "tiles"):
        _field(record, key, where, _is_numbers,
               "a list of finite numbers within +-1e30, one per CP rank")
    _field(record, "attention_ms", where, lambda v: _is_numbers(v, nullable=True),
           "a list of finite numbers within +-1e30 (or null), one per CP rank")
    baseline = _field(record, "contiguous_imbalance", where, lambda v: isinstance(v, dict),
                      "a record of pairs and tiles")
    for key in ("pairs", "tiles"):
        _field(baseline, key, f"{where} contiguous_imbalance", _is_number, _NUMBER)
    return record


def _hybrid_record(record, where):
    _field(record, "step", where, _is_int, "a step number")
    _field(record, "scheduler", where, lambda v: isinstance(v, str), "a scheduler name")
    ranks = _field(record, "ranks", where,
                   lambda v: isinstance(v, list) and 0 < len(v) <= _MAX_RANKS,
                   "a list of rank records")
    for i, rank in enumerate(ranks):
        at = f"{where} ranks[{i}]"
        if not isinstance(rank, dict):
            raise FulcrumError("invalid_argument", f"{at} is not a record; {_METRICS_FIX}")
        _field(rank, "rank", at, lambda v: _is_int(v, 0, _MAX_RANKS - 1),
               f"a rank in [0, {_MAX_RANKS})")
        for key in ("busy_ms", "attention_ms"):
            _field(rank, key, at, _is_number, _NUMBER)
    return record


def rank_busy_by_step(hybrid):
    """Hybrid mode, per step: the busiest rank's measured slot time over the
    mean over ranks."""
    steps = sorted({h["step"] for h in hybrid})
    by_step = {h["step"]: [r["busy_ms"] for r in h["ranks"]] for h in hybrid}
    out = []
    for s in steps:
        busy = np.asarray(by_step[s], dtype=np.float64)
        mean = busy.mean()
        out.append(busy.max() / mean if mean > 0 else 1.0)
    return {"step": np.array(steps), "busy": np.array(out)}


def hybrid_attention_ms_by_rank(hybrid):
    """Hybrid mode: measured attention time summed over the run, per rank."""
    world = 1 + max(r["rank"] for h in hybrid for r in h["ranks"])
    if world > _MAX_BARS:
        raise FulcrumError("invalid_argument", f"the metrics name {world} ranks, more than the "
                           f"{_MAX_BARS} a picture can show; {_METRICS_FIX}")
    total = np.zeros(world)
    for h in hybrid:
        for r in h["ranks"]:
            total[r["rank"]] += r["attention_ms"]
    return total


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
    if dp * cp > _MAX_BARS:
        raise FulcrumError("invalid_argument", f"the metrics name {dp} DP x {cp} CP ranks, more "
                           f"than the {_MAX_BARS} a picture can show; {_METRICS_FIX}")
    total = np.zeros((dp, cp))
    for m in micro:
        for c, ms in enumerate(m["attention_ms"]):
            if ms is not None:
                total[m["dp_rank"], c] += ms
    return total


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


class _Mt19937_64:
    """The 64-bit Mersenne Twister (std::mt19937_64): the engine the C++
    side draws its synthetic documents from, so a seed means the same
    lengths in both."""

    _N, _M, _MASK = 312, 156, (1 << 64) - 1

    def __init__(self, seed):
        self._mt = [seed & self._MASK]
        for i in range(1, self._N):
            prev = self._mt[-1]
            self._mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & self._MASK)
        self._index = self._N

    def _twist(self):
        mt, n, m = self._mt, self._N, self._M
        for i in range(n):
            y = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % n] & 0x7FFFFFFF)
            mt[i] = mt[(i + m) % n] ^ (y >> 1) ^ (0xB5026F5AA96619E9 if y & 1 else 0)
        self._index = 0

    def __call__(self):
        if self._index >= self._N:
            self._twist()
        y = self._mt[self._index]
        self._index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & self._MASK


def _round_half_away(x):
    whole = math.floor(x)
    return whole + 1 if x - whole >= 0.5 else whole


def synthetic_document_lengths(count, seed, max_length=1 << 20):
    """core/synthetic.cpp's mix, draw for draw: 60% short web-like documents
    (log-normal around 500 tokens), 36% mid-length (around 3000) and a 4%
    log-uniform tail from 16K to ``max_length``."""
    rng = _Mt19937_64(seed)

    def uniform01():
        return (rng() >> 11) * (1.0 / 9007199254740992.0)

    def standard_normal():
        u1 = 1.0 - uniform01()
        u2 = uniform01()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)

    cap = float(max(max_length, 1))
    tail_lo = min(16384.0, cap)
    lengths = []
    for _ in range(max(count, 0)):
        pick = uniform01()
        if pick < 0.60:
            length = math.exp(math.log(500.0) + 1.0 * standard_normal())
        elif pick < 0.96:
            length = math.exp(math.log(3000.0) + 0.8 * standard_normal())
        else:
            length = math.exp(math.log(tail_lo) + uniform01() * (math.log(cap) - math.log(tail_lo)))
        lengths.append(int(min(max(_round_half_away(length), 1.0), cap)))
    return lengths


def synthetic_packed_row(tokens, seed):
    """The row of ``fulcrum plan --seq-len N --synthetic-docs SEED``: the
    synthetic mix packed in order from document ``seed % count``, the last
    one cut to fill the row exactly."""
    docs = synthetic_document_lengths(tokens // 1000 + 64, seed)
    row, room, at = [], tokens, seed % len(docs)
    while room > 0:
        length = min(docs[at], room)
        row.append(length)
        room -= length
        at = (at + 1) % len(docs)
    return row


def random_docs(tokens, seed):
    """A seeded packed row; the same as synthetic_packed_row, the C++ CLI's
    --synthetic-docs (kept under its earlier name)."""
    return synthetic_packed_row(tokens, seed)


# The C++ CLI's rules for lengths (runtime/cli/cli_common.cpp), in its words.
_LENGTH_LIST_HINT = "give comma-separated positive integers, e.g. 4096,812,77"
_LENGTH_FILE_HINT = "give a file holding a JSON list of positive integers, e.g. [4096, 812, 77]"
_MAX_LENGTH_FILE_BYTES = 256 << 20
_MAX_LENGTH_FILE_DEPTH = 64
_MAX_TOKENS = 1 << 31
_MAX_CP = 1 << 20
_MAX_DPI = 1200


def _quote(text):
    return "'" + "".join(" " if ord(c) < 0x20 or ord(c) == 0x7F else c
                         for c in text[:60] + ("..." if len(text) > 60 else "")) + "'"


def parse_length_list(text, option="--doc-lengths"):
    """``a,b,c`` as positive integers, as the CLI's --doc-lengths."""
    if not text.strip(" \t"):
        raise FulcrumError("invalid_argument", f"{option} is empty; {_LENGTH_LIST_HINT}")
    lengths = []
    for index, item in enumerate(text.split(","), 1):
        item = item.strip(" \t")
        if not (item.isascii() and item.lstrip("-").isdigit() and item.count("-") <= 1
                and not item.startswith("+")) or int(item) < 1 or int(item) > 2**63 - 1:
            raise FulcrumError("invalid_argument", f"{option}: item {index} is "
                               f"{_quote(item) if item else 'empty'}, not a positive integer; "
                               f"{_LENGTH_LIST_HINT}")
        lengths.append(int(item))
    return _total_tokens(lengths, option)


def read_length_file(path, option="--doc-lengths-file"):
    """A JSON list of positive integers, read as the CLI's --doc-lengths-file."""
    what = f"{option} {_input_file.shown(path)}"
    rules = _input_file.InputRules(what, _LENGTH_FILE_HINT, _MAX_LENGTH_FILE_BYTES)
    raw = _input_file.read_input_file(path, rules)
    within, at = _input_file.json_nesting_within(raw, _MAX_LENGTH_FILE_DEPTH)
    if not within:
        raise FulcrumError("invalid_argument", f"{what} nests lists or objects more than "
                           f"{_MAX_LENGTH_FILE_DEPTH} deep at byte {at}; {_LENGTH_FILE_HINT}")
    text = raw.decode("utf-8", "surrogateescape")
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        byte = len(text[:error.pos].encode("utf-8", "surrogateescape"))
        raise FulcrumError("invalid_argument", f"{what} is not valid JSON at byte {byte} "
                           f"({error.msg}); {_LENGTH_FILE_HINT}") from None
    except _NotJson as error:
        raise FulcrumError("invalid_argument", f"{what} is not valid JSON ({error}); "
                           f"{_LENGTH_FILE_HINT}") from None
    except (ValueError, RecursionError):
        raise FulcrumError("invalid_argument", f"{what} holds a number out of range; "
                           f"{_LENGTH_FILE_HINT}") from None
    if not isinstance(value, list):
        kind = {dict: "object", str: "string", bool: "boolean", type(None): "null"}.get(
            type(value), "number")
        raise FulcrumError("invalid_argument", f"{what} holds a JSON {kind}, not a list; "
                           f"{_LENGTH_FILE_HINT}")
    if not value:
        raise FulcrumError("invalid_argument", f"{what} holds an empty list; {_LENGTH_FILE_HINT}")
    for index, item in enumerate(value, 1):
        if not _is_int(item, 1):
            raise FulcrumError("invalid_argument", f"{what}: item {index} is "
                               f"{_quote(json.dumps(item, separators=(',', ':')))}, not a "
                               f"positive integer; {_LENGTH_FILE_HINT}")
    return _total_tokens(value, option)


def _total_tokens(lengths, option):
    if sum(lengths) > _MAX_TOKENS:
        raise FulcrumError("invalid_argument", f"{option} adds up to more than {_MAX_TOKENS} "
                           "tokens, the longest row fulcrum plans; give a shorter row")
    return lengths


def _row(args):
    given = [flag for flag, value in (("--seq-len", args.seq_len),
                                      ("--lengths", args.lengths),
                                      ("--lengths-file", args.lengths_file),
                                      ("--doc-lengths", args.doc_lengths),
                                      ("--doc-lengths-file", args.doc_lengths_file))
             if value is not None]
    if len(given) != 1:
        raise FulcrumError("invalid_argument", ("no row given" if not given else
                                                "more than one row given") +
                           "; give exactly one of --seq-len N (with --synthetic-docs SEED), "
                           "--lengths a,b,c or --lengths-file F.json")
    if args.random_docs is not None and args.seq_len is None:
        raise FulcrumError("invalid_argument", "--synthetic-docs needs --seq-len N, the row "
                           "length to fill with documents; e.g. --seq-len 65536 --synthetic-docs 1")
    if args.seq_len is not None:
        if not 1 <= args.seq_len <= _MAX_TOKENS:
            raise FulcrumError("invalid_argument", f"--seq-len must be an integer from 1 to "
                               f"{_MAX_TOKENS}, got '{args.seq_len}'; give the row length in "
                               "tokens, e.g. --seq-len 131072")
        if args.random_docs is None:
            return None
        if not 0 <= args.random_docs < 2**64:
            raise FulcrumError("invalid_argument", f"--synthetic-docs must be an integer from 0 "
                               f"to {2**64 - 1}, got '{args.random_docs}'; give a seed, e.g. "
                               "--synthetic-docs 1")
        return random_docs(args.seq_len, args.random_docs)
    if args.doc_lengths is not None:
        return parse_length_list(args.doc_lengths, "--doc-lengths")
    if args.lengths is not None:
        return parse_length_list(args.lengths, "--lengths")
    if args.lengths_file is not None:
        return read_length_file(args.lengths_file, "--lengths-file")
    return read_length_file(args.doc_lengths_file, "--doc-lengths-file")


# What one picture may take, as `fulcrum plan` bounds its work
# (runtime/cli/work_bounds.h): refused before planning, in one line with the
# estimate, past these.
_MAX_SECONDS = 4.0
_MAX_BYTES = 1.5e9


def estimate_plot_plan(tokens, doc_lengths, block_size, cp, strategies, tile_map, formats):
    """(what, seconds, bytes) of ``plot plan``: planning ``strategies``
    plans of the row by the CLI's rule (estimate_plan), plus what the
    plotter adds. The coefficients are upper envelopes of /usr/bin/time
    measurements on the 2-core development machine at a load average of 8
    to 10 (docs/RELIABILITY.md, "Bounded before it starts"): per format,
    1.2 ms a bar of the comparison (one per rank and strategy) and 60 ms a
    panel of the tile map; for the tile map, 160 ns and 40 bytes a token
    (the plan's copies and the map's computation) and 110 ns and 16 bytes a
    tile drawn. Startup (about 1.3 s) is not counted."""
    lengths = [tokens] if doc_lengths is None else doc_lengths
    blocks = sum(-(-length // block_size) for length in lengths)
    n, u, p = float(tokens), float(blocks), float(cp)
    seconds = strategies * (80e-9 * n + 430e-9 * u + 15e-6 * p)
    size = 16.0 * n * strategies + 90.0 * u + 2200.0 * p
    if tile_map:
        cells = p * -(-(-(-tokens // cp)) // block_size) * -(-tokens // block_size)
        seconds += 160e-9 * n + 110e-9 * cells + 60e-3 * p * formats
        size += 40.0 * n + 16.0 * cells
    else:
        seconds += 1.2e-3 * p * strategies * formats
    docs = len(lengths)
    what = (f"a row of {tokens} tokens in {docs} document{'s' if docs != 1 else ''} ({blocks} "
            f"block{'s' if blocks != 1 else ''} of {block_size}) on {cp} rank"
            f"{'s' if cp != 1 else ''}" + (" as a tile map" if tile_map else
                                           f" with {strategies} strategies"))
    return what, seconds, size


def _within_bounds(estimate):
    return estimate[1] <= _MAX_SECONDS and estimate[2] <= _MAX_BYTES


def _refuse_beyond_bounds(tokens, docs, block_size, cp, strategies, tile_map, formats):
    """Raises FulcrumError when estimate_plot_plan is past the bounds,
    naming the estimate and what to shrink."""
    estimate = estimate_plot_plan(tokens, docs, block_size, cp, strategies, tile_map, formats)
    if _within_bounds(estimate):
        return
    what, seconds, size = estimate
    advice = "give a shorter row, a larger --block-size or fewer ranks"
    if formats > 1 and _within_bounds(estimate_plot_plan(tokens, docs, block_size, cp,
                                                         strategies, tile_map, 1)):
        advice += ", or one of --formats png or svg"
    if not tile_map and _within_bounds(estimate_plot_plan(tokens, docs, block_size, cp, 1, True,
                                                          formats)):
        advice += ", or one --strategy for its tile map"
    raise FulcrumError("invalid_argument", f"{what} would take about {seconds:.1f} s and "
                       f"{size / 1e9:.1f} GB, more than the {_MAX_SECONDS:.0f} s and "
                       f"{_MAX_BYTES / 1e9:.1f} GB python3 -m fulcrum.plot plan allows; {advice}")


def _check_options(args):
    if args.command == "plan" and not 1 <= args.cp <= _MAX_CP:
        raise FulcrumError("invalid_argument", f"--cp must be an integer from 1 to {_MAX_CP}, "
                           f"got '{args.cp}'; give the number of CP ranks, e.g. --cp 8")
    if args.command == "plan" and not 1 <= args.block_size <= _MAX_TOKENS:
        raise FulcrumError("invalid_argument", f"--block-size must be an integer from 1 to "
                           f"{_MAX_TOKENS}, got '{args.block_size}'; give the tile edge, e.g. 128")
    if not 1 <= args.dpi <= _MAX_DPI:
        raise FulcrumError("invalid_argument", f"--dpi must be an integer from 1 to {_MAX_DPI}, "
                           f"got '{args.dpi}'; give the PNG resolution, e.g. --dpi 110")
    if args.command == "plan":
        work_model.Mask.parse(args.mask)
    if not args.out:
        raise FulcrumError("invalid_argument", "--out is empty; give an output prefix, e.g. "
                           "--out plans/compare")


class _Parser(argparse.ArgumentParser):
    """argparse's usage errors as one line and exit 2, like every other refusal."""

    def error(self, message):
        print(f"fulcrum.plot: {' '.join(message.split())}; see python3 -m fulcrum.plot "
              f"{'' if self.prog.endswith('plot') else self.prog.split()[-1] + ' '}--help",
              file=sys.stderr)
        sys.exit(2)


def main(argv=None):
    parser = _Parser(prog="python3 -m fulcrum.plot", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    plan = sub.add_parser("plan", help="per-rank work of every strategy, or one plan's tile map")
    plan.add_argument("--plugin", default="fulcrum_balancer", help="plugin name or path")
    plan.add_argument("--cp", type=int, required=True)
    plan.add_argument("--seq-len", type=int)
    plan.add_argument("--synthetic-docs", "--random-docs", dest="random_docs", type=int,
                      metavar="SEED",
                      help="fill --seq-len with seeded packed documents, the mix of fulcrum "
                           "plan --synthetic-docs (--random-docs: the same, its earlier name)")
    plan.add_argument("--lengths", metavar="a,b,c",
                      help="row of packed documents with these lengths")
    plan.add_argument("--lengths-file", metavar="F.json",
                      help="row of packed documents whose lengths are a JSON list in F.json")
    plan.add_argument("--doc-lengths", metavar="a,b,c", help="the same as --lengths (its "
                      "earlier name)")
    plan.add_argument("--doc-lengths-file", metavar="F.json", help="the same as --lengths-file "
                      "(its earlier name)")
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
        _check_options(args)
        if args.command == "run":
            fig = run_figure(args.metrics)
        else:
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
                                      bool(args.strategy), len(formats))
                def plan_one(name):
                    return balancer.plan_cp(name, cp=args.cp, tokens=args.seq_len if docs is None
                                            else None, doc_lengths=docs,
                                            block_size=args.block_size, mask=args.mask)
                if args.strategy:
                    fig = tile_map_figure(plan_one(args.strategy))
                else:
                    fig = plan_compare_figure([plan_one(s) for s in balancer.cp_strategies])
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


if __name__ == "__main__":
    sys.exit(main())
