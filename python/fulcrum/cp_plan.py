"""CP plans: one row sharded over the CP ranks (Balancer.plan_cp), the
plugin's answer copied out of its buffers and checked as the host checks a
plan, and the figures of the plan."""

import ctypes
import time
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

from . import _abi
from . import work as work_model
from ._c_values import _INT32, _INT64, _MASK_KINDS, _MAX_NAME_BYTES, _MAX_TEXT_BYTES, _Lent
from ._c_values import _c_int, _c_text, _int64_array, _member_weights
from .errors import FulcrumError

_CHUNK = 8192  # entries per temporary in _runs: 64 KiB of int64
# A shard holds at most this many entries per row token, plus this many
# (kMaxShardFactor, as the host's plan check).
_MAX_SHARD_FACTOR = 64


@dataclass(frozen=True)
class Imbalance:
    pairs: float
    tiles: float


@dataclass(frozen=True)
class RankWork:
    rank: int
    tokens: int
    pairs: int
    tiles: int


@dataclass(frozen=True, eq=False)
class CpPlan:
    """One row sharded over ``cp`` ranks; the fields of ``fulcrum plan --format json``.

    ``positions[r]`` is rank r's shard in local order (global token positions,
    -1 for padding). ``restore[q]`` is where token q sits in
    ``positions.reshape(-1)``, so ``positions.reshape(-1)[restore]`` is
    ``arange(tokens)``.
    """

    requested: str
    used: str
    fallback_reason: Optional[str]
    cp: int
    block_size: int
    tokens: int
    mask: str
    padding: int
    doc_lengths: Optional[np.ndarray]  # None: one document of `tokens`
    positions: np.ndarray
    rank_tokens: np.ndarray
    rank_pairs: np.ndarray
    rank_tiles: np.ndarray
    imbalance: Imbalance
    tiles_over_ideal: float
    plan_time_us: float
    work_source: str  # "plugin" or "python" (the plugin returned no figures)
    _restore: Optional[np.ndarray] = field(default=None, repr=False)

    @property
    def restore(self):
        """restore[q] = index of token q in positions.reshape(-1); computed on
        first use (a cumulative sum over N, the costliest step of a plan)."""
        if self._restore is None:
            object.__setattr__(self, "_restore", _restore_index(self.positions, self.tokens))
        return self._restore

    @property
    def shard_len(self):
        return self.positions.shape[1]

    @property
    def ranks(self) -> List[RankWork]:
        return [
            RankWork(r, int(self.rank_tokens[r]), int(self.rank_pairs[r]), int(self.rank_tiles[r]))
            for r in range(self.cp)
        ]

    def to_json(self, positions=False):
        """The dictionary ``fulcrum plan --format json`` prints for this plan."""
        ranks = []
        for w in self.ranks:
            entry = {"rank": w.rank, "tokens": w.tokens, "pairs": w.pairs, "tiles": w.tiles}
            if positions:
                entry["positions"] = self.positions[w.rank].tolist()
            ranks.append(entry)
        return {
            "requested": self.requested,
            "used": self.used,
            "fallback_reason": self.fallback_reason,
            "cp": self.cp,
            "block_size": self.block_size,
            "tokens": self.tokens,
            "padding": self.padding,
            "ranks": ranks,
            "imbalance": {"pairs": self.imbalance.pairs, "tiles": self.imbalance.tiles},
            "tiles_over_ideal": self.tiles_over_ideal,
            "plan_time_us": round(self.plan_time_us, 1),
        }



class CpPlanning:
    """Balancer.plan_cp and its steps; a part of Balancer."""

    def plan_cp(self, strategy="auto", *, cp, tokens=None, doc_lengths=None, block_size=128,
                mask="causal", fallback="contiguous", member_weights=None):
        """Shards one row over ``cp`` ranks.

        Give ``tokens`` (one document), ``doc_lengths`` (packed documents), or
        both. When the strategy cannot serve the row (FULCRUM_UNSUPPORTED) the
        ``fallback`` strategy serves it and ``fallback_reason`` says why; with
        ``fallback=None`` that raises instead. Any other failure raises
        FulcrumError with the plugin's message. ``member_weights`` (ABI 1.5):
        ``cp`` weights for a strategy that takes them (a schedule's
        per_document_weighted slot), each finite and >= 0."""
        cp = _c_int(cp, "cp", _INT32)
        block_size = _c_int(block_size, "block_size", _INT64)
        mask = work_model.Mask.parse(mask)
        docs = None
        if doc_lengths is not None:
            docs = _int64_array(doc_lengths, "doc_lengths")
            if docs.size == 0:
                raise FulcrumError("invalid_argument",
                                   "doc_lengths is empty; give at least one document length")
            if tokens is None:
                tokens = int(docs.sum(dtype=object)) if docs.size else 0
        if tokens is None:
            raise FulcrumError("invalid_argument",
                               "no row given; give tokens=N, doc_lengths=[...] or both")
        tokens = _c_int(tokens, "tokens", _INT64)
        weights = _member_weights(member_weights, cp)
        _c_text(strategy, "strategy")
        if fallback is not None:
            _c_text(fallback, "fallback")

        request = _abi.CpRequest()
        request.struct_size = ctypes.sizeof(request)
        request.cp_size = cp
        request.tokens = tokens
        request.block_size = block_size
        lent = _Lent()
        if docs is not None:
            request.doc_lengths = lent.array("doc_lengths", docs)
            request.num_docs = docs.size
        request.mask_kind = _MASK_KINDS[mask.kind]
        request.mask_param = _c_int(mask.param, "mask parameter", _INT64)
        if weights is not None:
            request.member_weights = lent.reals("member_weights", weights)

        start = time.perf_counter_ns()
        with self._lock:
            instance = self._live_instance()
            answer, error = self._plan_locked(instance, request, strategy, lent)
            reason = None
            fell_back = False
            if (error is not None and error.code == "unsupported" and fallback is not None
                    and fallback != strategy):
                # The plugin's own words, without the "plugin 'x' strategy 'y': " prefix.
                reason = error.message.split(": ", 1)[1]
                fell_back = True
                answer, error = self._plan_locked(instance, request, fallback, lent)
        elapsed_us = (time.perf_counter_ns() - start) / 1000.0
        if error is not None:
            raise error
        if reason is not None and answer.reason:
            reason = f"{reason}; {answer.reason}"
        elif reason is None:
            reason = answer.reason
        served_by = answer.used or (fallback if fell_back else strategy)
        return self._finish_plan(strategy, served_by, reason, block_size, tokens, docs, mask,
                                 answer, elapsed_us)

    def _plan_locked(self, instance, request, strategy, lent):
        """One plan_cp call and the copy of its answer; (answer, None) or (None, error)."""
        request.strategy = lent.text("strategy", strategy)
        lent.watch("fulcrum_cp_request", request)
        plan = _abi.CpPlan()
        plan.struct_size = ctypes.sizeof(plan)
        status = self._table.plan_cp(instance, ctypes.byref(request), ctypes.byref(plan))
        try:
            self._check_lent(lent, "strategy", strategy)
            if status != _abi.OK:
                return None, self._failure(status, strategy)
            return self._copy_plan(plan, request, strategy), None
        except FulcrumError as error:
            return None, error
        finally:
            # Exactly once for every FULCRUM_OK, however the copy ended.
            if status == _abi.OK:
                self._table.release_plan(instance, ctypes.byref(plan))

    def _copy_plan(self, plan, request, strategy):
        """Copies what the plugin owns into NumPy; checks what the copy needs."""
        bad = f"plugin {self.name!r} strategy {strategy!r} returned an invalid plan: "
        cp = request.cp_size
        if plan.cp_size != cp:
            raise FulcrumError("internal", bad + f"cp_size {plan.cp_size}, the request has {cp}")
        # The counts say how much is read from the plugin's buffers: they must
        # agree with each other and stay within what a valid plan holds before
        # anything is read.
        longest = (request.tokens + 1) * _MAX_SHARD_FACTOR
        if plan.shard_len < 0 or plan.shard_len > longest:
            raise FulcrumError("internal", bad + f"shard_len {plan.shard_len} is out of range "
                               f"[0, {longest}]")
        total = plan.shard_len * cp
        if total < request.tokens:
            raise FulcrumError("internal", bad + f"{cp} shards of {plan.shard_len} positions "
                               f"cannot hold {request.tokens} tokens")
        if plan.padding != total - request.tokens:
            raise FulcrumError("internal", bad + f"{cp} shards of {plan.shard_len} positions hold "
                               f"{total - request.tokens} pads for {request.tokens} tokens, but "
                               f"it reports padding {plan.padding}")
        if not plan.positions:
            raise FulcrumError("internal",
                               bad + f"positions is null with shard_len {plan.shard_len}")
        try:
            positions = np.empty(total, dtype=np.int64)
        except (MemoryError, ValueError):
            raise FulcrumError("internal", bad + f"shard_len {plan.shard_len} asks for "
                               f"{total * 8} bytes") from None
        ctypes.memmove(positions.ctypes.data, plan.positions, total * 8)
        pairs = tiles = None
        if plan.rank_pairs and plan.rank_tiles:
            pairs = np.empty(cp, dtype=np.int64)
            tiles = np.empty(cp, dtype=np.int64)
            ctypes.memmove(pairs.ctypes.data, plan.rank_pairs, cp * 8)
            ctypes.memmove(tiles.ctypes.data, plan.rank_tiles, cp * 8)
        return _PlanCopy(
            positions=positions.reshape(cp, plan.shard_len),
            padding=plan.padding,
            used=self._answer_text(plan.strategy_used, _MAX_NAME_BYTES, bad, "strategy_used"),
            reason=self._answer_text(plan.fallback_reason, _MAX_TEXT_BYTES, bad,
                                     "fallback_reason"),
            pairs=pairs,
            tiles=tiles,
        )

    def _finish_plan(self, requested, used, reason, block_size, tokens, docs, mask, answer,
                     elapsed_us):
        """Validates the plan as the host does, then fills in the figures."""
        positions = answer.positions
        cp, shard_len = positions.shape
        flat = positions.reshape(-1)
        bad = f"plugin {self.name!r} strategy {used!r} returned an invalid plan: "
        if flat.size and (int(flat.min()) < -1 or int(flat.max()) >= tokens):
            raise FulcrumError("internal", bad + f"a position lies outside [-1, {tokens})")
        runs = _runs(flat)
        padding = int(runs.pad.sum())
        if padding != answer.padding:
            raise FulcrumError("internal", bad + f"it says {answer.padding} pad positions but "
                               f"holds {padding}")
        ends = runs.value + runs.length
        if (runs.value.size == 0 or runs.value[0] != 0 or ends[-1] != tokens
                or (runs.value[1:] != ends[:-1]).any()):
            raise FulcrumError("internal", bad + f"it is not a permutation of [0, {tokens}) "
                               "plus padding: a token is missing or listed twice")
        rank_tokens = np.full(cp, shard_len, dtype=np.int64)
        if padding:
            rank_tokens -= np.bincount(runs.pad_slots // shard_len, minlength=cp)
        if answer.pairs is not None:
            pairs, tiles, source = answer.pairs, answer.tiles, "plugin"
        else:
            _, pairs, tiles = work_model.rank_work(positions, tokens, docs, block_size, mask)
            source = "python"
        ideal = work_model.unsharded_tiles(tokens, docs, block_size, mask)
        over_ideal = float(tiles.max()) * cp / ideal if ideal > 0 else 1.0
        return CpPlan(
            requested=requested, used=used, fallback_reason=reason, cp=cp,
            block_size=block_size, tokens=tokens, mask=str(mask), padding=int(padding),
            doc_lengths=docs,
            positions=positions, rank_tokens=rank_tokens, rank_pairs=pairs,
            rank_tiles=tiles,
            imbalance=Imbalance(work_model.imbalance(pairs), work_model.imbalance(tiles)),
            tiles_over_ideal=over_ideal, plan_time_us=elapsed_us, work_source=source)


@dataclass(frozen=True)
class _Runs:
    """A plan's maximal runs of consecutive positions, real ones sorted by
    position: value (first position), length, slot (where the run starts in
    the flat plan); and the slots of the pads (each pad is a run of its own)."""

    value: np.ndarray
    length: np.ndarray
    slot: np.ndarray
    pad: np.ndarray
    pad_slots: np.ndarray


def _runs(flat):
    """Sequential passes only (no scatter, no sort of N entries): a plan is a
    permutation of [0, N) plus padding exactly when its sorted real runs tile
    [0, N)."""
    breaks = np.empty(flat.size, dtype=bool)
    breaks[:1] = True
    # In chunks, so that the temporaries stay small enough for malloc to reuse
    # them rather than map fresh pages each call (page faults cost more than
    # the arithmetic here).
    for start in range(0, flat.size - 1, _CHUNK):
        window = flat[start:start + _CHUNK + 1]
        out = breaks[start + 1:start + window.size]
        np.not_equal(window[1:], window[:-1] + 1, out=out)
        out |= window[:-1] < 0
    run_slot = np.flatnonzero(breaks)
    run_value = flat[run_slot]
    run_len = np.diff(np.append(run_slot, flat.size))
    pad = run_value < 0
    real = ~pad
    order = np.argsort(run_value[real], kind="stable")
    return _Runs(value=run_value[real][order], length=run_len[real][order],
                 slot=run_slot[real][order], pad=pad, pad_slots=run_slot[pad])


def _restore_index(positions, tokens):
    """restore[q] = slot of q. It steps by 1 inside a run and jumps at a run's
    first position, so it is the cumulative sum of those steps."""
    runs = _runs(positions.reshape(-1))
    restore = np.ones(tokens, dtype=np.int64)
    previous_last = np.zeros_like(runs.slot)
    previous_last[1:] = (runs.slot + runs.length - 1)[:-1]
    restore[runs.value] = runs.slot - previous_last
    return np.cumsum(restore, out=restore)


@dataclass(frozen=True)
class _PlanCopy:
    positions: np.ndarray
    padding: int
    used: Optional[str]
    reason: Optional[str]
    pairs: Optional[np.ndarray]
    tiles: Optional[np.ndarray]

