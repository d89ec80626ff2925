"""DP partitions: samples split over the DP ranks (Balancer.partition_dp),
the plugin's answer checked as the host checks a partition, and the cost
models the split is measured in."""

import ctypes
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import List

import numpy as np

from . import _abi
from . import _input_file
from ._c_values import _INT32, _Lent, _c_int, _c_text, _int64_array
from .errors import FulcrumError

DEFAULT_ATTENTION_A = 24576.0
_DECIMAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
# Entries after each DP answer buffer, and what they hold until a plugin
# writes past the buffer.
_GUARD = 16
_GUARD_VALUE = -(2**63) + 0x5AFE


@dataclass(frozen=True, eq=False)
class DpPartition:
    """Samples split over DP ranks; the fields of ``fulcrum dp-partition --format json``.

    ``ranks[r]`` holds rank r's sample indices (into the lengths given)."""

    strategy: str
    cost: str
    ranks: List[np.ndarray]
    rank_cost: np.ndarray
    imbalance: float
    lower_bound: float
    lengths: np.ndarray = field(repr=False)

    def to_json(self):
        return {
            "strategy": self.strategy,
            "cost": self.cost,
            "ranks": [{"rank": r, "samples": s.tolist(), "cost": float(self.rank_cost[r])}
                      for r, s in enumerate(self.ranks)],
            "imbalance": self.imbalance,
            "lower_bound": self.lower_bound,
        }


def parse_cost(text):
    """(cost_kind, a, canonical text) of ``tokens``, ``attention`` or ``attention:A``."""
    how = "; use tokens, attention or attention:A with a number A >= 0"
    if text == "tokens":
        return _abi.COST_TOKENS, DEFAULT_ATTENTION_A, "tokens"
    if text == "attention":
        return _abi.COST_ATTENTION, DEFAULT_ATTENTION_A, _cost_text(DEFAULT_ATTENTION_A)
    if isinstance(text, str) and text.startswith("attention:"):
        number = text[len("attention:"):]
        # std::from_chars' grammar: no '+', no '_', ASCII digits only.
        a = float(number) if _DECIMAL.fullmatch(number) else None
        if a is None or not np.isfinite(a) or a < 0:
            raise FulcrumError("invalid_argument", f"cost model {_input_file.shown(text, 80)} "
                               f"needs a number A >= 0 after 'attention:'{how}")
        return _abi.COST_ATTENTION, a, _cost_text(a)
    raise FulcrumError("invalid_argument", f"unknown cost model {_input_file.shown(text, 80)}{how}")


def _cost_text(a):
    """attention:A with A in the shortest form that reads back as the same
    double, fixed or scientific, whichever is shorter (ties fixed), as the C++
    side writes it."""
    digits = Decimal(repr(a)).normalize()
    fixed = format(digits, "f")
    sign, mantissa, exponent = digits.as_tuple()
    text = "".join(map(str, mantissa))
    sci = text[0] + ("." + text[1:] if len(text) > 1 else "")
    e = exponent + len(text) - 1
    sci = ("-" if sign else "") + sci + ("e-" if e < 0 else "e+") + f"{abs(e):02d}"
    return "attention:" + (fixed if len(fixed) <= len(sci) else sci)


class DpPartitioning:
    """Balancer.partition_dp; a part of Balancer."""

    def partition_dp(self, lengths, dp, strategy="auto", *, cost="tokens", equal_count=False):
        """Splits samples of the given lengths over ``dp`` ranks."""
        k = _c_int(dp, "dp", _INT32)
        if k < 1:
            raise FulcrumError("invalid_argument", f"dp is {k}; it must be at least 1")
        lengths = _int64_array(lengths, "lengths")
        n = lengths.size
        if n == 0:
            raise FulcrumError("invalid_argument", "no samples; give at least one length")
        cost_kind, a, cost_text = parse_cost(cost)
        if not isinstance(equal_count, (bool, np.bool_)):
            raise FulcrumError("invalid_argument", f"equal_count is "
                               f"{_input_file.shown(equal_count, 60)}; give True or False")
        _c_text(strategy, "strategy")

        request = _abi.DpRequest()
        request.struct_size = ctypes.sizeof(request)
        request.num_ranks = k
        lent = _Lent()
        request.lengths = lent.array("lengths", lengths)
        request.num_samples = n
        request.cost_kind = cost_kind
        request.equal_count = 1 if equal_count else 0
        request.attention_a = a
        request.strategy = lent.text("strategy", strategy)
        lent.watch("fulcrum_dp_request", request)
        # The answer's buffers, each followed by a guard, as the host does: a
        # plugin that writes a little past the sizes it was given is named.
        offsets = np.concatenate((np.zeros(k + 1, dtype=np.int64),
                                  np.full(_GUARD, _GUARD_VALUE, dtype=np.int64)))
        samples = np.concatenate((np.full(n, -1, dtype=np.int64),
                                  np.full(_GUARD, _GUARD_VALUE, dtype=np.int64)))
        result = _abi.DpResult()
        result.struct_size = ctypes.sizeof(result)
        result.num_ranks = k
        result.rank_offsets = offsets.ctypes.data_as(_abi.c_int64_p)
        result.samples = samples.ctypes.data_as(_abi.c_int64_p)
        with self._lock:
            instance = self._live_instance()
            status = self._table.partition_dp(instance, ctypes.byref(request),
                                              ctypes.byref(result))
            self._check_lent(lent, "strategy", strategy)
            for buffer, entries, field_name in ((offsets, k + 1, "rank_offsets"),
                                                (samples, n, "samples")):
                past = np.flatnonzero(buffer[entries:] != _GUARD_VALUE)
                if past.size:
                    raise FulcrumError("internal", f"plugin {self.name!r} strategy {strategy!r} "
                                       f"wrote past the end of {field_name} ({entries} entries, "
                                       f"written at entry {entries + int(past[0])}), memory the "
                                       f"host did not lend it; fix the plugin ({self.path})")
            offsets, samples = offsets[:k + 1], samples[:n]
            if status != _abi.OK:
                raise self._failure(status, strategy)

        bad = f"plugin {self.name!r} strategy {strategy!r} returned an invalid partition: "
        _check_partition(bad, result.num_ranks, offsets, samples, equal_count)
        ranks = [samples[offsets[r]:offsets[r + 1]].copy() for r in range(k)]
        return _measured(strategy, (cost_kind, a, cost_text), lengths, ranks, equal_count)


def _check_partition(bad, num_ranks, offsets, samples, equal_count):
    """Raises FulcrumError, ``bad`` leading its message, unless the answer's
    rank offsets and sample indices are a partition of the samples into
    ``len(offsets) - 1`` ranks (of equal counts, give or take one, under
    equal_count)."""
    k, n = offsets.size - 1, samples.size
    if num_ranks != k:
        raise FulcrumError("internal", bad + f"it has {num_ranks} ranks, the request "
                           f"asked for {k}")
    if offsets[0] != 0 or offsets[k] != n:
        raise FulcrumError("internal", bad + f"rank offsets span [{offsets[0]}, {offsets[k]}), "
                           f"expected [0, {n})")
    counts = np.diff(offsets)
    if (counts < 0).any():
        r = int(np.flatnonzero(counts < 0)[0])
        raise FulcrumError("internal", bad + f"rank {r + 1} starts before rank {r}")
    if equal_count and (counts.min() < n // k or counts.max() > -(-n // k)):
        r = int(np.flatnonzero((counts < n // k) | (counts > -(-n // k)))[0])
        raise FulcrumError("internal", bad + f"rank {r} has {counts[r]} samples under "
                           f"equal_count, expected {n // k} or {-(-n // k)}")
    if samples.min() < 0 or samples.max() >= n:
        raise FulcrumError("internal", bad + f"a sample index lies outside [0, {n})")
    if np.bincount(samples, minlength=n).max() > 1:
        raise FulcrumError("internal", bad + "a sample is listed twice")


def _measured(strategy, parsed_cost, lengths, ranks, equal_count):
    """The DpPartition of ``ranks`` with its costs, imbalance and lower bound,
    summed as the C++ side sums them."""
    cost_kind, a, cost_text = parsed_cost
    k, n = len(ranks), lengths.size
    item_cost = (lengths.astype(np.float64) if cost_kind == _abi.COST_TOKENS
                 else a * lengths.astype(np.float64) + lengths.astype(np.float64) ** 2)
    # Summed one by one in the C++ order (np.sum would pair the terms
    # up and differ in the last bits).
    rank_cost = np.array([np.cumsum(item_cost[s])[-1] if s.size else 0.0 for s in ranks])
    total = np.cumsum(rank_cost)[-1]
    mean = total / k
    imbalance = float(rank_cost.max() / mean) if mean > 0 else 1.0
    bound = max(mean, float(item_cost.max()))
    if equal_count:
        cheapest = np.sort(item_cost)[:-(-n // k)]
        bound = max(bound, float(np.cumsum(cheapest)[-1]))
    return DpPartition(strategy=strategy, cost=cost_text, ranks=ranks, rank_cost=rank_cost,
                       imbalance=imbalance, lower_bound=float(bound), lengths=lengths)

