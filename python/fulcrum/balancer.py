"""A loaded balancer plugin, called through the C ABI of include/fulcrum/c_api.h.

Lifetimes follow the header: the library stays loaded for the life of the
process once opened (ctypes cannot unload it safely while function pointers
may be held); the plugin instance lives from ``load`` until ``close`` (or
garbage collection); a plan's buffers are the plugin's until ``release_plan``,
which is called exactly once for every FULCRUM_OK, after the copy into NumPy.
One instance is used by one thread at a time: every call holds the
balancer's lock, and ``last_error`` is read under the same lock as the call
it describes.
"""

import ctypes
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import List, Optional

import numpy as np

from . import _abi
from . import _input_file
from . import work as work_model
from .errors import FulcrumError
from . import loader
from . import schedule as schedule_model

_LOG = logging.getLogger("fulcrum")
_LOG_LEVELS = {
    _abi.LOG_DEBUG: logging.DEBUG,
    _abi.LOG_INFO: logging.INFO,
    _abi.LOG_WARNING: logging.WARNING,
    _abi.LOG_ERROR: logging.ERROR,
}
# More strategies than this means the count field is garbage (as the host).
_MAX_STRATEGIES = 4096
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
DEFAULT_ATTENTION_A = 24576.0
_CHUNK = 8192  # entries per temporary in _runs: 64 KiB of int64
# Counts past these in a schedule answer mean a corrupt answer, not a big batch.
_MAX_SLOTS = 1 << 24
_MAX_PIECES = 1 << 40
_DECIMAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_MASK_KINDS = {"causal": _abi.MASK_CAUSAL, "full": _abi.MASK_FULL,
               "sliding": _abi.MASK_SLIDING, "prefix": _abi.MASK_PREFIX}
# The host's bounds on text from a plugin (plugin_loader.cpp): names, and
# free text (reasons, errors, log lines).
_MAX_NAME_BYTES = 256
_MAX_TEXT_BYTES = 4096
# A shard holds at most this many entries per row token, plus this many
# (kMaxShardFactor, as the host's plan check).
_MAX_SHARD_FACTOR = 64
# Entries after each DP answer buffer, and what they hold until a plugin
# writes past the buffer.
_GUARD = 16
_GUARD_VALUE = -(2**63) + 0x5AFE
_LIBC = ctypes.CDLL(None)
_LIBC.strnlen.restype = ctypes.c_size_t
_LIBC.strnlen.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
# C0 and C1 controls, DEL, and the line and paragraph separators.
_CONTROL = frozenset(list(range(0x20)) + list(range(0x7f, 0xa0)) + [0x2028, 0x2029])


def _address(pointer):
    """The address a ctypes pointer or c_char_p field holds, or 0."""
    if pointer is None:
        return 0
    if isinstance(pointer, int):
        return pointer
    return ctypes.cast(pointer, ctypes.c_void_p).value or 0


def _bounded_bytes(address, limit):
    """The bytes at `address` up to their NUL, reading at most limit + 1;
    (bytes, terminated within limit)."""
    length = _LIBC.strnlen(address, limit + 1)
    return ctypes.string_at(address, min(length, limit)), length <= limit


def _checked_text(address, limit):
    """(text, None) when the bytes are what the ABI promises: NUL-terminated
    within `limit`, UTF-8, no control character; else (None, why)."""
    raw, terminated = _bounded_bytes(address, limit)
    if not terminated:
        return None, f"is not NUL-terminated within {limit} bytes"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return None, f"is not UTF-8 (byte {error.start} is 0x{raw[error.start]:02x})"
    for i, char in enumerate(text):
        if ord(char) in _CONTROL:
            return None, (f"holds the control character U+{ord(char):04X} at byte "
                          f"{len(text[:i].encode('utf-8'))}")
    return text, None


def _printable_text(address, limit):
    """The bytes at `address` shown on one line whatever they hold: controls
    and bytes that are not UTF-8 escaped (\\n, \\xHH), cut after `limit`."""
    raw, terminated = _bounded_bytes(address, limit)
    text = raw.decode("utf-8", "backslashreplace")
    out = []
    for char in text:
        code = ord(char)
        if code in _CONTROL:
            named = {0x0a: "\\n", 0x0d: "\\r", 0x09: "\\t"}.get(code)
            out.append(named or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"))
        else:
            out.append(char)
    return "".join(out) + ("" if terminated else "...")


class _Lent:
    """What a call lends the plugin. A `const` pointer is a promise the plugin
    can break, and the arrays behind it may be the caller's own: the plugin
    reads private copies, made per call, and after the call each copy is
    compared with what it was lent from, so that a plugin that wrote through
    a `const` pointer is named and refused and never rewrites a caller's
    NumPy array. The request struct itself is compared byte for byte, as
    the C++ host's LentMemory does."""

    def __init__(self):
        self._arrays = []
        self._texts = []
        self._structs = {}

    def watch(self, field, struct):
        """The request struct itself, compared byte for byte after the call
        (its padding too: ctypes zeroes a struct when it makes it). Watching
        a field again replaces its bytes: a retry with another strategy
        lends the struct anew."""
        address, size = ctypes.addressof(struct), ctypes.sizeof(struct)
        self._structs[field] = (address, ctypes.string_at(address, size))

    def array(self, field, values):
        copy = np.array(values, dtype=np.int64, copy=True)
        self._arrays.append((field, values, copy))
        return copy.ctypes.data_as(_abi.c_int64_p)

    def text(self, field, value):
        data = value.encode("utf-8")
        buffer = ctypes.create_string_buffer(data, len(data) + 1)
        self._texts.append((field, data + b"\0", buffer))
        return ctypes.cast(buffer, ctypes.c_char_p)

    def changed(self):
        """What the plugin wrote into, as a message names it, or None."""
        for field, (address, before) in self._structs.items():
            if ctypes.string_at(address, len(before)) != before:
                return f"the request struct {field}"
        for field, original, copy in self._arrays:
            differ = np.flatnonzero(copy != original)
            if differ.size:
                i = int(differ[0])
                return f"{field}[{i}] ({int(original[i])} lent, {int(copy[i])} after the call)"
        for field, original, buffer in self._texts:
            if buffer.raw != original:
                return f"the string {field}"
        return None


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


def _c_int(value, name, bounds):
    """An integer that the C field can hold exactly (bools and floats refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise FulcrumError("invalid_argument",
                           f"{name} is {value!r}; it must be an integer")
    value = int(value)
    if not bounds[0] <= value <= bounds[1]:
        raise FulcrumError("invalid_argument",
                           f"{name} is {value}, outside the range the C ABI carries "
                           f"[{bounds[0]}, {bounds[1]}]")
    return value


def _c_text(value, name):
    """A name the C ABI can carry: a str of UTF-8 text without NUL (ctypes
    would cut it there), of a sane length."""
    if not isinstance(value, str):
        raise FulcrumError("invalid_argument", f"{name} is {_input_file.shown(value, 60)}; give "
                           "a name (a str)")
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError:
        encoded = None
    if encoded is None or b"\0" in encoded or not encoded or len(encoded) > 4096:
        raise FulcrumError("invalid_argument", f"{name} {_input_file.shown(value, 60)} is not a "
                           "name: give non-empty UTF-8 text without NUL bytes, at most 4096 bytes")
    return value


def _int64_array(values, name):
    if isinstance(values, (str, bytes, dict)) or values is None:
        raise FulcrumError("invalid_argument", f"{name} is {_input_file.shown(values, 60)}; give "
                           "a flat list of integers")
    try:
        array = np.asarray(values)
    except (TypeError, ValueError, OverflowError, RecursionError, MemoryError) as error:
        raise FulcrumError("invalid_argument", f"{name} is not a list of integers: "
                           f"{type(error).__name__}: {error}") from None
    if array.ndim != 1:
        raise FulcrumError("invalid_argument",
                           f"{name} has shape {array.shape}; give a flat list of integers")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise FulcrumError("invalid_argument",
                           f"{name} has {array.dtype} entries; give integers")
    if array.size and array.dtype == np.uint64 and int(array.max()) > np.iinfo(np.int64).max:
        raise FulcrumError("invalid_argument", f"{name} has entries beyond int64")
    return np.ascontiguousarray(array, dtype=np.int64)


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


class Balancer:
    """A plugin loaded and checked, with one instance. Use ``load`` to make one.

    Usable as a context manager; ``close`` destroys the instance."""

    def __init__(self, library, table, path):
        self._library = library  # keeps the code of every pointer below alive
        self._table = table
        self.path = path
        # _check_table has checked every name (UTF-8, no control character).
        self.name = table.name.decode("utf-8")
        self.abi_version = (table.abi_major, table.abi_minor)
        self.cp_strategies = [table.cp_strategies[i].decode("utf-8")
                              for i in range(table.num_cp_strategies)]
        self.dp_strategies = [table.dp_strategies[i].decode("utf-8")
                              for i in range(table.num_dp_strategies)]
        # ABI 1.1's scheduler, when the plugin's table has one (_check_table
        # returns the longer view only then).
        has_scheduler = isinstance(table, _abi.PluginTableV1_1) and bool(table.schedule)
        self.schedule_strategies = [
            table.schedule_strategies[i].decode("utf-8")
            for i in range(table.num_schedule_strategies)] if has_scheduler else []
        self._has_scheduler = has_scheduler
        self._lock = threading.Lock()
        self._instance = None
        self._log_callback = _abi.LogFn(self._forward_log)
        self._services = _abi.HostServices(ctypes.sizeof(_abi.HostServices), None,
                                           self._log_callback)
        raw = ctypes.c_void_p()
        status = table.create(ctypes.byref(self._services), ctypes.byref(raw))
        if status != _abi.OK or not raw.value:
            if status == _abi.OK:
                raise FulcrumError("internal", f"plugin {self.name!r} ({path}) returned no "
                                   "instance from create(); fix the plugin")
            raise FulcrumError("internal", f"plugin {self.name!r} ({path}) failed to create an "
                               f"instance (status {status}); see its log, or run its own tests")
        self._instance = raw

    # -- lifetime -----------------------------------------------------------

    def close(self):
        """Destroys the plugin instance; later calls raise FulcrumError."""
        with self._lock:
            if self._instance is not None:
                instance, self._instance = self._instance, None
                self._table.destroy(instance)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_instance", None) is not None:
            self._table.destroy(self._instance)
            self._instance = None

    def __repr__(self):
        return (f"Balancer(name={self.name!r}, path={self.path!r}, "
                f"abi={self.abi_version[0]}.{self.abi_version[1]})")

    def _live_instance(self):
        if self._instance is None:
            raise FulcrumError("invalid_argument",
                               f"balancer {self.name!r} is closed; load the plugin again")
        return self._instance

    def _forward_log(self, _user_data, level, message):
        try:
            text = _printable_text(message, _MAX_TEXT_BYTES) if message else ""
            _LOG.log(_LOG_LEVELS.get(level, logging.WARNING), "plugin '%s': %s", self.name, text)
        except Exception:  # noqa: BLE001 - nothing may unwind into the plugin's C frames
            pass

    def _check_lent(self, lent, kind, strategy):
        """Raises FulcrumError when the plugin wrote into what it was lent."""
        changed = lent.changed()
        if changed is not None:
            raise FulcrumError("internal", f"plugin {self.name!r} {kind} {strategy!r} wrote into "
                               f"{changed}, which the host lent it read-only; the answer is "
                               f"refused and the caller's data kept; fix the plugin ({self.path})")

    def _answer_text(self, pointer, limit, bad, field):
        """Text a plugin answered with, refused unless it is what the ABI
        promises; None for NULL."""
        address = _address(pointer)
        if not address:
            return None
        text, why = _checked_text(address, limit)
        if why is not None:
            raise FulcrumError("internal", bad + f"{field} {why}; fix the plugin ({self.path})")
        return text

    def _failure(self, status, strategy):
        """The plugin's last_error as a FulcrumError; call with the lock held."""
        raw = self._table.last_error(self._instance)
        # Shown, not refused: escaped to one line whatever it holds.
        said = _printable_text(raw, _MAX_TEXT_BYTES) if raw else ""
        said = said or "failed without a message"
        code = _abi.STATUS_NAMES.get(status)
        if code is None or code == "ok":
            code, said = "internal", f"{said} (unknown status {status})"
        return FulcrumError(code, f"plugin {self.name!r} strategy {strategy!r}: {said}")

    # -- CP ----------------------------------------------------------------

    def plan_cp(self, strategy="auto", *, cp, tokens=None, doc_lengths=None, block_size=128,
                mask="causal", fallback="contiguous"):
        """Shards one row over ``cp`` ranks.

        Give ``tokens`` (one document), ``doc_lengths`` (packed documents), or
        both. When the strategy cannot serve the row (FULCRUM_UNSUPPORTED) the
        ``fallback`` strategy serves it and ``fallback_reason`` says why; with
        ``fallback=None`` that raises instead. Any other failure raises
        FulcrumError with the plugin's message."""
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

    # -- hybrid placement -------------------------------------------------

    def schedule(self, strategy="hybrid", *, world, max_tokens_per_rank, doc_lengths, profile,
                 mask="causal", block_size=128, cp=0, group_shapes=None):
        """Places one global batch of documents on ``world`` ranks (the ABI 1.1
        schedule hook; docs/HYBRID.md). ``profile`` is a schedule.CostProfile,
        a dict of its fields, a bundled profile's name (h100_7b, cpu_gloo) or
        the path of a profile YAML file, as the CLI's --profile. ``cp`` is
        the `fixed` scheduler's group size (0: it chooses). The schedule is
        checked as the host checks it before it is returned. A plugin without
        a scheduler (ABI 1.0) raises FulcrumError 'unsupported': the C++
        host serves its built-in fixed schedule there, a Python caller
        decides. ``group_shapes`` (a schedule.GroupShapes, ABI 1.2)
        restricts the groups; a plugin older than 1.2 would not see it, so
        it raises 'unsupported' there."""
        world = _c_int(world, "world", _INT32)
        budget = _c_int(max_tokens_per_rank, "max_tokens_per_rank", _INT64)
        block_size = _c_int(block_size, "block_size", _INT64)
        cp = _c_int(cp, "cp", _INT32)
        for value, what in ((world, "world"), (budget, "max_tokens_per_rank"),
                            (block_size, "block_size")):
            if value < 1:
                raise FulcrumError("invalid_argument", f"{what} is {value}; it must be at least 1")
        if cp < 0:
            raise FulcrumError("invalid_argument", f"cp is {cp}; give 0 (choose) or a size >= 1")
        docs = _int64_array(doc_lengths, "doc_lengths")
        if docs.size == 0 or int(docs.min()) < 1:
            raise FulcrumError("invalid_argument", "doc_lengths must list at least one document, "
                               "each of at least 1 token")
        if not isinstance(profile, schedule_model.CostProfile):
            profile = (schedule_model.CostProfile.from_mapping(profile) if isinstance(profile, dict)
                       else schedule_model.CostProfile.resolve(profile))
        mask = work_model.Mask.parse(mask)
        _c_text(strategy, "strategy")
        if not self._has_scheduler:
            raise FulcrumError("unsupported", f"plugin {self.name!r} (ABI "
                               f"{self.abi_version[0]}.{self.abi_version[1]}) has no scheduler; "
                               "load a plugin of ABI 1.1 or later, or use `fulcrum schedule`, "
                               "which serves the host's fixed schedule")

        if group_shapes is not None and not isinstance(group_shapes, schedule_model.GroupShapes):
            raise FulcrumError("invalid_argument", "group_shapes must be a "
                               "fulcrum.schedule.GroupShapes")
        shaped = group_shapes is not None and group_shapes.restricts()
        if shaped and tuple(self.abi_version) < (1, 2):
            raise FulcrumError("unsupported", f"plugin {self.name!r} (ABI "
                               f"{self.abi_version[0]}.{self.abi_version[1]}) cannot restrict "
                               "group shapes; load a plugin of ABI 1.2 or later")

        request = _abi.ScheduleRequest()
        request.struct_size = ctypes.sizeof(request)
        if shaped:
            request.group_sizes = group_shapes.mask()
            request.group_flags = ((_abi.GROUPS_WORLD if group_shapes.world else 0)
                                   | (_abi.GROUPS_ALIGNED if group_shapes.aligned else 0)
                                   | (_abi.GROUPS_EVERY_WAVE if group_shapes.every_wave else 0))
            request.wave_multiple = group_shapes.wave_multiple
        request.world_size = world
        request.max_tokens_per_rank = budget
        lent = _Lent()
        request.doc_lengths = lent.array("doc_lengths", docs)
        request.num_docs = docs.size
        request.mask_kind = _MASK_KINDS[mask.kind]
        request.mask_param = _c_int(mask.param, "mask parameter", _INT64)
        request.cp_size = cp
        request.block_size = block_size
        request.strategy = lent.text("strategy", strategy)
        request.profile_name = lent.text("profile_name", profile.name)
        for key in schedule_model.CostProfile.__dataclass_fields__:
            if key != "name":
                setattr(request, key, getattr(profile, key))
        lent.watch("fulcrum_schedule_request", request)

        answer = _abi.ScheduleAnswer()
        answer.struct_size = ctypes.sizeof(answer)
        start = time.perf_counter_ns()
        with self._lock:
            instance = self._live_instance()
            status = self._table.schedule(instance, ctypes.byref(request), ctypes.byref(answer))
            try:
                self._check_lent(lent, "scheduler", strategy)
                if status != _abi.OK:
                    raise self._failure(status, strategy)
                copied = self._copy_schedule(answer, world, budget, docs, strategy)
            finally:
                # Exactly once for every FULCRUM_OK, however the copy ended.
                if status == _abi.OK:
                    self._table.release_schedule(instance, ctypes.byref(answer))
        elapsed_us = (time.perf_counter_ns() - start) / 1000.0
        used, reason, slots = copied
        result = schedule_model.Schedule(
            requested=strategy, used=used or strategy, fallback_reason=reason, world=world,
            max_tokens_per_rank=budget, doc_lengths=docs, slots=slots, plan_time_us=elapsed_us)
        schedule_model.check_schedule(result, self.name)
        if shaped:
            schedule_model.check_group_shapes(result, group_shapes, self.name)
        return result

    def _copy_schedule(self, answer, world, budget, docs, strategy):
        """Copies the plugin's flat arrays into per-slot NumPy arrays, checking
        every count before it is used as a length, against what the batch
        allows: no more slots than pieces, no shard longer than the batch
        plus the budget."""
        bad = f"plugin {self.name!r} scheduler {strategy!r} returned an invalid schedule: "
        # A document longer than W x T is cut in pieces of W x T.
        num_pieces = sum(-(-length // (world * budget)) for length in docs.tolist())
        batch_tokens = sum(docs.tolist())
        count = answer.num_slots
        if count < 0 or count > min(_MAX_SLOTS, num_pieces):
            raise FulcrumError("internal", bad + f"num_slots is {count}, outside [0, "
                               f"{num_pieces}], the batch's piece count")

        def copy(pointer, n, dtype, what):
            if n == 0:
                return np.empty(0, dtype=dtype)
            if not pointer:
                raise FulcrumError("internal", bad + f"{what} is null")
            out = np.empty(n, dtype=dtype)
            ctypes.memmove(out.ctypes.data, pointer, out.nbytes)
            return out

        def offsets(pointer, what, limit):
            out = copy(pointer, count + 1, np.int64, what)
            if out[0] != 0 or (np.diff(out) < 0).any() or out[-1] > limit:
                raise FulcrumError("internal", bad + f"{what} is not a non-decreasing list from 0")
            return out

        rank_offsets = offsets(answer.slot_rank_offsets, "slot_rank_offsets", count * world)
        piece_offsets = offsets(answer.slot_piece_offsets, "slot_piece_offsets",
                                min(_MAX_PIECES, num_pieces))
        ranks = copy(answer.ranks, int(rank_offsets[-1]), np.int32, "ranks")
        pieces = int(piece_offsets[-1])
        piece_docs = copy(answer.piece_docs, pieces, np.int64, "piece_docs")
        piece_starts = copy(answer.piece_starts, pieces, np.int64, "piece_starts")
        piece_lengths = copy(answer.piece_lengths, pieces, np.int64, "piece_lengths")
        waves = copy(answer.slot_waves, count, np.int32, "slot_waves")
        shard_lens = copy(answer.slot_shard_lens, count, np.int64, "slot_shard_lens")
        padding = copy(answer.slot_padding, count, np.int64, "slot_padding")
        sizes = np.diff(rank_offsets)
        if (shard_lens < 0).any() or (shard_lens > batch_tokens + budget).any():
            raise FulcrumError("internal", bad + "a slot's shard length is out of range [0, "
                               f"{batch_tokens + budget}] (the batch plus the budget)")
        position_ends = np.concatenate(([0], np.cumsum(sizes * shard_lens)))
        positions = copy(answer.positions, int(position_ends[-1]), np.int64, "positions")
        plans = [None] * count
        if answer.slot_plan_strategies and count:
            raw = (ctypes.c_void_p * count).from_address(_address(answer.slot_plan_strategies))
            plans = [self._answer_text(p, _MAX_NAME_BYTES, bad, f"slot_plan_strategies[{s}]")
                     for s, p in enumerate(raw)]
        slots = []
        for s in range(count):
            g, n = int(sizes[s]), int(shard_lens[s])
            p0, p1 = int(piece_offsets[s]), int(piece_offsets[s + 1])
            slots.append(schedule_model.ScheduleSlot(
                slot=s, group=ranks[rank_offsets[s]:rank_offsets[s + 1]].copy(),
                wave=int(waves[s]), docs=piece_docs[p0:p1].copy(),
                offsets=piece_starts[p0:p1].copy(), lengths=piece_lengths[p0:p1].copy(),
                positions=positions[position_ends[s]:position_ends[s + 1]].reshape(g, n).copy(),
                padding=int(padding[s]), plan=plans[s]))
        used = self._answer_text(answer.strategy_used, _MAX_NAME_BYTES, bad, "strategy_used")
        reason = self._answer_text(answer.fallback_reason, _MAX_TEXT_BYTES, bad, "fallback_reason")
        return used, reason, slots

    # -- DP ----------------------------------------------------------------

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
        if result.num_ranks != k:
            raise FulcrumError("internal", bad + f"it has {result.num_ranks} ranks, the request "
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

        ranks = [samples[offsets[r]:offsets[r + 1]].copy() for r in range(k)]
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


def load(name_or_path=loader.DEFAULT_PLUGIN, *, search_dirs=None, check_permissions=True):
    """Loads a plugin by name (searched in ``search_dirs``, else
    $FULCRUM_PLUGIN_PATH, this checkout's build, the recorded install
    directories, <sys.prefix>/lib/fulcrum and /usr/local/lib/fulcrum: see
    loader.default_search_dirs) or by path (contains '/'), with the host's
    checks: the file and every directory above it owned by root or this user
    and not writable by group or others, a complete ELF file,
    dlopen(RTLD_NOW | RTLD_LOCAL), the table checked field by field, an
    instance created. Raises FulcrumError naming what was refused and why."""
    given, path = loader.resolve_plugin_path(name_or_path, search_dirs)
    if check_permissions:
        loader.check_permissions(path, given)
    loader.check_elf_complete(path)
    try:
        library = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as error:
        raise FulcrumError("internal", f"cannot load plugin {path}: {error}; check that it is a "
                           "fulcrum plugin built for this platform and that its dependencies "
                           f"resolve (ldd {path})") from None
    try:
        entry = getattr(library, _abi.PLUGIN_ENTRY)
    except AttributeError:
        raise FulcrumError("internal", f"plugin {path} does not export {_abi.PLUGIN_ENTRY}; is it "
                           "a fulcrum plugin? Export one with FULCRUM_EXPORT_PLUGIN") from None
    entry.restype = ctypes.c_void_p
    entry.argtypes = []
    address = entry()
    table = _check_table(address, path)
    return Balancer(library, table, path)


def _check_table(address, path):
    """Everything the host relies on before calling through the table."""
    if not address:
        raise FulcrumError("internal", f"plugin {path}: {_abi.PLUGIN_ENTRY}() returned no "
                           "function table (the plugin failed to initialise); run it under its "
                           "own tests or rebuild it")
    header = _abi.TableHeader.from_address(address)
    if header.struct_size < _abi.TABLE_HEADER_SIZE:
        raise FulcrumError("internal", f"plugin {path} has a function table of "
                           f"{header.struct_size} bytes, too small to hold its ABI version; "
                           "rebuild it against this fulcrum")
    if header.abi_major != _abi.ABI_MAJOR:
        raise FulcrumError("internal", f"plugin {path} was built for ABI major "
                           f"{header.abi_major}, this package speaks {_abi.ABI_MAJOR}; rebuild "
                           "it against this fulcrum")
    if header.struct_size < _abi.TABLE_V1_SIZE:
        raise FulcrumError("internal", f"plugin {path} has a function table of struct_size "
                           f"{header.struct_size} bytes, smaller than the {_abi.TABLE_V1_SIZE} "
                           "bytes of ABI v1.0; it was built against a broken c_api.h, rebuild it "
                           "against this fulcrum")
    table = _abi.PluginTableV1.from_address(address)
    for field_name in ("create", "destroy", "plan_cp", "release_plan", "partition_dp",
                       "last_error"):
        if not getattr(table, field_name):
            raise FulcrumError("internal", f"plugin {path}: required function '{field_name}' is "
                               "null in its table; the plugin is incomplete, implement it and "
                               "rebuild")
    if not table.name:
        raise FulcrumError("internal", f"plugin {path} has no name in its table; set "
                           "fulcrum_plugin_v1::name and rebuild")

    def check_name(address, field):
        # Names reach messages, JSON and logs as they are.
        _, why = _checked_text(address, _MAX_NAME_BYTES)
        if why is not None:
            raise FulcrumError("internal", f"plugin {path}: its {field} {why}; names are UTF-8 "
                               f"without control characters, at most {_MAX_NAME_BYTES} bytes: "
                               "fix the table and rebuild")

    check_name(ctypes.c_void_p.from_address(address + _abi.PluginTableV1.name.offset).value,
               "name")
    for names, count, what in ((table.cp_strategies, table.num_cp_strategies, "cp_strategies"),
                               (table.dp_strategies, table.num_dp_strategies, "dp_strategies")):
        if count < 0 or count > _MAX_STRATEGIES:
            raise FulcrumError("internal", f"plugin {path} lists {count} {what}; expected 0 to "
                               f"{_MAX_STRATEGIES}, its table is corrupt")
        if count > 0 and not names:
            raise FulcrumError("internal", f"plugin {path}: {what} is null but its count is "
                               f"{count}; fix the table and rebuild")
        addresses = (ctypes.c_void_p * count).from_address(_address(names)) if count else []
        for i in range(count):
            if not addresses[i]:
                raise FulcrumError("internal", f"plugin {path}: {what}[{i}] is null; fix the "
                                   "table and rebuild")
            check_name(addresses[i], f"{what}[{i}]")
    # ABI 1.1 appends the scheduler; a table too short to hold it is a 1.0
    # plugin and keeps the 1.0 view.
    if not _abi.table_has(header.struct_size, _abi.PluginTableV1_1, "release_schedule"):
        return table
    table = _abi.PluginTableV1_1.from_address(address)
    if bool(table.schedule) != bool(table.release_schedule):
        raise FulcrumError("internal", f"plugin {path} sets only one of schedule and "
                           "release_schedule; a scheduler needs both, fix the table and rebuild")
    count = table.num_schedule_strategies
    if table.schedule:
        addresses = ([] if count < 1 or count > _MAX_STRATEGIES or not table.schedule_strategies
                     else (ctypes.c_void_p * count).from_address(
                         _address(table.schedule_strategies)))
        if not addresses or not all(addresses):
            raise FulcrumError("internal", f"plugin {path} has a scheduler but its "
                               f"schedule_strategies ({count}) are not a list of names; fix the "
                               "table and rebuild")
        for i in range(count):
            check_name(addresses[i], f"schedule_strategies[{i}]")
    return table
