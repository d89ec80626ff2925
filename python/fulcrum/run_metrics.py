"""A training run's metrics file (``fulcrum train --metrics``) read with the
C++ readers' rules, every field the pictures use checked, and the series
drawn from it: imbalance by step and attention time by rank."""

import json
import math

import numpy as np

from . import _input_file
from .errors import FulcrumError


# A metrics file is one JSON record per line; a run of a million steps is far
# under this. Lines nest two deep; the bound is the C++ JSONL reader's.
_MAX_METRICS_BYTES = 1 << 30
_MAX_METRICS_DEPTH = 64
# Ranks a metrics file may name, as the C++ side's largest group.
_MAX_RANKS = 1 << 20
# Bars (ranks) one picture shows at most: past this it is unreadable and
# matplotlib takes minutes and gigabytes to draw it (plot.py draws no more).
MAX_BARS = 1024
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
    if world > MAX_BARS:
        raise FulcrumError("invalid_argument", f"the metrics name {world} ranks, more than the "
                           f"{MAX_BARS} a picture can show; {_METRICS_FIX}")
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
    if dp * cp > MAX_BARS:
        raise FulcrumError("invalid_argument", f"the metrics name {dp} DP x {cp} CP ranks, more "
                           f"than the {MAX_BARS} a picture can show; {_METRICS_FIX}")
    total = np.zeros((dp, cp))
    for m in micro:
        for c, ms in enumerate(m["attention_ms"]):
            if ms is not None:
                total[m["dp_rank"], c] += ms
    return total
