"""Hybrid DP x CP schedules from Python: the plugin's ABI 1.1 `schedule` hook.

A schedule places one global batch of documents on a pool of W ranks as
slots: a group of ranks, the document pieces it runs packed into one row, the
row's CP plan over the group, and a wave (docs/HYBRID.md). This module holds
the result types, the cost profile a scheduler is given, and the checks the
C++ host applies to every schedule before use (`validate_schedule` in
core/schedule.cpp): exact cover of the batch's pieces, distinct ranks
in range, at most T tokens per member, one slot per rank per wave, each slot's
plan a permutation of its row plus padding. Predicted step times come from
the C++ cost model: `fulcrum schedule --format json` prints them.
"""

import errno
import math
import os
import re
import stat
from dataclasses import dataclass, fields
from typing import List, Optional

import numpy as np

from . import _input_file
from ._input_file import shown
from .errors import FulcrumError

# The C++ loader's bounds (include/fulcrum/host/cost_profile_file.h and
# validate_cost_profile in core/cost_profile.cpp), in its words.
_MAX_PROFILE_BYTES = 64 * 1024
_HOUR = 3600.0
_MAX_KV_BYTES = float(1 << 30)
_MAX_BANDWIDTH = 1e15
_MAX_RANKS_PER_NODE = 1 << 20
# (least, exclusive, most) per coefficient.
_BOUNDS = {
    "tile_seconds": (0.0, False, _HOUR),
    "token_seconds": (0.0, False, _HOUR),
    "slot_seconds": (0.0, False, _HOUR),
    "kv_bytes_per_token": (0.0, True, _MAX_KV_BYTES),
    "intra_node_bytes_per_second": (1.0, False, _MAX_BANDWIDTH),
    "inter_node_bytes_per_second": (1.0, False, _MAX_BANDWIDTH),
    "latency_seconds": (0.0, False, _HOUR),
    "exchange_overlap": (0.0, False, 1.0),
    "row_token_seconds": (0.0, False, _HOUR),
    "partial_tile_seconds": (0.0, False, _HOUR),
}
# Fields a profile may leave out (0): later terms, so older files keep their
# meaning.
_OPTIONAL = ("exchange_overlap", "row_token_seconds", "partial_tile_seconds")
_FIX = "fix it in the profile (docs/HYBRID.md lists every field)"
# A YAML number as yaml-cpp reads one, and its special values.
_NUMBER = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_INTEGER = re.compile(r"[-+]?[0-9]+")
_SPECIAL = {".inf": math.inf, ".Inf": math.inf, ".INF": math.inf, "+.inf": math.inf,
            "-.inf": -math.inf, "-.Inf": -math.inf, "-.INF": -math.inf,
            ".nan": math.nan, ".NaN": math.nan, ".NAN": math.nan}


def _number_text(value):
    """%.6g, as the C++ messages print numbers."""
    return "%.6g" % value


@dataclass(frozen=True)
class CostProfile:
    """Coefficients of the step-time cost model (CostProfile in
    include/fulcrum/schedule_types.h); times in seconds, sizes in bytes.
    Every coefficient is checked as validate_cost_profile checks it."""

    name: str
    tile_seconds: float
    token_seconds: float
    slot_seconds: float
    kv_bytes_per_token: float
    intra_node_bytes_per_second: float
    inter_node_bytes_per_second: float
    latency_seconds: float
    ranks_per_node: int
    # Share of min(compute, exchange) a member's exchange hides behind its
    # compute, in [0, 1] (docs/HYBRID.md section 2); ABI 1.3.
    exchange_overlap: float = 0.0
    # Seconds per token of a slot's whole row that every member pays
    # (docs/HYBRID.md section 2); ABI 1.4.
    row_token_seconds: float = 0.0
    # Seconds per partial tile on top of tile_seconds (docs/HYBRID.md
    # section 2); ABI 1.6.
    partial_tile_seconds: float = 0.0

    def __post_init__(self):
        try:
            encoded = self.name.encode("utf-8") if isinstance(self.name, str) else None
        except UnicodeEncodeError:
            encoded = None
        if not encoded or b"\0" in encoded or len(encoded) > 4096:
            raise FulcrumError("invalid_argument", f"cost profile name is {shown(self.name, 60)};"
                               " the name must be a non-empty string of UTF-8 text without NUL "
                               "bytes, at most 4096 bytes")
        where = f"cost profile {shown(self.name, 80)}"
        for key, (least, exclusive, most) in _BOUNDS.items():
            value = getattr(self, key)
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                             np.floating)):
                raise FulcrumError("invalid_argument", f"{where}: {key} is {shown(value, 60)}, "
                                   f"not a number; {_FIX}")
            try:
                value = float(value)
            except OverflowError:
                value = math.inf
            object.__setattr__(self, key, value)
            if not math.isfinite(value):
                rule = "is not finite"
            elif exclusive and not value > least:
                rule = "must be > 0"
            elif not exclusive and value < least:
                rule = "must be >= 0" if least == 0 else "must be >= 1"
            elif value > most:
                rule = f"must be <= {_number_text(most)}"
            else:
                continue
            raise FulcrumError("invalid_argument", f"{where}: {key} = {_number_text(value)} "
                               f"{rule}; {_FIX}")
        value = self.ranks_per_node
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise FulcrumError("invalid_argument", f"{where}: ranks_per_node is "
                               f"{shown(value, 60)}, not an integer; {_FIX}")
        if not 1 <= value <= _MAX_RANKS_PER_NODE:
            raise FulcrumError("invalid_argument", f"{where}: ranks_per_node = "
                               f"{_number_text(value)} must be in [1, "
                               f"{_number_text(_MAX_RANKS_PER_NODE)}]; {_FIX}")
        object.__setattr__(self, "ranks_per_node", int(value))

    @classmethod
    def from_mapping(cls, mapping, source="mapping"):
        """A profile from a dict with exactly CostProfile's field names."""
        if not isinstance(mapping, dict):
            raise FulcrumError("invalid_argument", f"cost profile {source} must be one mapping "
                               f"of CostProfile's fields ({', '.join(_PROFILE_FIELDS)}); it "
                               "holds something else")
        unknown = sorted(shown(k, 60) for k in mapping if k not in _PROFILE_FIELDS)
        if unknown:
            raise FulcrumError("invalid_argument", f"cost profile {source}: unknown key "
                               f"{unknown[0]}; known keys at the top level: "
                               f"{', '.join(_PROFILE_FIELDS)}")
        missing = [name for name in _PROFILE_FIELDS
                   if name not in mapping and name not in _OPTIONAL]
        if missing:
            raise FulcrumError("invalid_argument", f"cost profile {source} does not set "
                               f"{missing[0]}; a profile sets every one of "
                               f"{', '.join(_PROFILE_FIELDS)}")
        return cls(**{name: mapping[name] for name in _PROFILE_FIELDS if name in mapping})

    @classmethod
    def bundled(cls, name):
        """One of the profiles bundled with the C++ side (h100_7b, h100_7b_fa3,
        h100_7b_nccl, cpu_gloo)."""
        if not isinstance(name, str) or name not in _BUNDLED:
            raise FulcrumError("not_found", f"cost profile {shown(name, 80)} is not bundled; use "
                               f"one of {', '.join(_BUNDLED)} or a profile YAML file "
                               "(docs/HYBRID.md)")
        return cls.from_mapping(_BUNDLED[name])

    @classmethod
    def resolve(cls, name_or_path):
        """A bundled profile's name, else a profile file's path, as the CLI's
        --profile (resolve_cost_profile): a bare word (no '/' or '.') that
        names no file was meant as a bundled name."""
        if isinstance(name_or_path, str) and name_or_path in _BUNDLED:
            return cls.bundled(name_or_path)
        raw = _input_file.as_path(name_or_path, "cost profile")
        if b"/" not in raw and b"." not in raw and not os.path.lexists(raw):
            raise FulcrumError("not_found", f"unknown cost profile {shown(name_or_path, 80)}; the "
                               f"bundled ones are {', '.join(_BUNDLED)}, or give the path of a "
                               "YAML profile file")
        return cls.load(name_or_path)

    @classmethod
    def load(cls, path):
        """A profile YAML file, as `fulcrum calibrate` writes and
        `fulcrum schedule --profile FILE` reads (docs/HYBRID.md), with the C++
        loader's rules: a regular file of at most 64 KiB, no NUL byte, one
        mapping, every field once and nothing else, numbers as yaml-cpp reads
        them, each in range."""
        try:
            import yaml
        except ImportError:
            raise FulcrumError("not_found", "reading a profile file needs PyYAML (Debian: "
                               "python3-yaml); or pass the profile as a dict") from None
        raw = _input_file.as_path(path, "cost profile file")
        file = shown(path)
        try:
            fd = os.open(raw, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError as error:
            if error.errno in (errno.ENOENT, errno.ENOTDIR):
                raise FulcrumError("not_found", f"cost profile file {file} not found; check the "
                                   f"path, or name a bundled profile ({', '.join(_BUNDLED)})") \
                    from None
            try:
                regular = stat.S_ISREG(os.stat(raw).st_mode)
            except OSError:
                regular = True
            if not regular:
                raise FulcrumError("invalid_argument", f"cost profile file {file} is not a "
                                   "regular file (a directory, device or pipe); give the path "
                                   "of a YAML file") from None
            raise FulcrumError("invalid_argument", f"cost profile file {file} cannot be read: "
                               f"{error.strerror}; check its path and permissions") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise FulcrumError("invalid_argument", f"cost profile file {file} is not a "
                                   "regular file (a directory, device or pipe); give the path "
                                   "of a YAML file")
            if _input_file.file_system_type(fd) in _input_file.GENERATED_FILE_SYSTEMS:
                raise FulcrumError("invalid_argument", f"cost profile file {file} is a /proc or "
                                   "/sys file, not a file of data; give the path of a YAML file")
            if info.st_size > _MAX_PROFILE_BYTES:
                raise FulcrumError("invalid_argument", f"cost profile file {file} is "
                                   f"{info.st_size} bytes, more than the {_MAX_PROFILE_BYTES} a "
                                   "profile of nine fields could need; check the path")
            os.set_blocking(fd, True)
            with os.fdopen(os.dup(fd), "rb") as handle:
                text = handle.read(_MAX_PROFILE_BYTES + 1)
        except OSError as error:
            raise FulcrumError("invalid_argument", f"cost profile file {file} could not be read "
                               f"({error.strerror}); check its permissions") from None
        finally:
            os.close(fd)
        if len(text) > _MAX_PROFILE_BYTES:
            raise FulcrumError("invalid_argument", f"cost profile file {file} grew past "
                               f"{_MAX_PROFILE_BYTES} bytes while being read; check the path")
        if b"\0" in text:
            raise FulcrumError("invalid_argument", f"cost profile file {file} holds a NUL byte, "
                               "so it is not YAML text; check the path")
        return cls._from_yaml(yaml, text, file)

    @classmethod
    def _from_yaml(cls, yaml, text, file):
        try:
            documents = list(yaml.load_all(text, Loader=_strict_loader()))
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            place = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else file
            problem = getattr(error, "problem", None) or "malformed YAML"
            raise FulcrumError("invalid_argument", f"cost profile {place}: {problem}; fix the "
                               "YAML syntax there") from None
        except RecursionError:
            raise FulcrumError("invalid_argument", f"cost profile {file} nests too deep for a "
                               "profile; write one flat mapping") from None
        documents = [d for d in documents if d not in (None, "")]
        if not documents:
            raise FulcrumError("invalid_argument", f"cost profile {file} is empty; write one "
                               f"mapping setting {', '.join(_PROFILE_FIELDS)}")
        if len(documents) != 1:
            raise FulcrumError("invalid_argument", f"cost profile {file} holds "
                               f"{len(documents)} YAML documents; write exactly one mapping")
        mapping = documents[0]
        if not isinstance(mapping, dict) or any(isinstance(v, (dict, list))
                                                for v in mapping.values()):
            raise FulcrumError("invalid_argument", f"cost profile {file} must be one YAML "
                               f"mapping of CostProfile's fields ({', '.join(_PROFILE_FIELDS)}); "
                               "it holds something else")
        if mapping.get("name", "x") == "":
            raise FulcrumError("invalid_argument", f"cost profile {file}: name is empty; give "
                               "the profile a name")
        values = {}
        for key, value in mapping.items():
            if key == "name" or key not in _PROFILE_FIELDS:
                values[key] = value
            elif key == "ranks_per_node":
                values[key] = int(value) if _INTEGER.fullmatch(value) else value
            elif value in _SPECIAL:
                values[key] = _SPECIAL[value]
            else:
                values[key] = float(value) if _NUMBER.fullmatch(value) else value
        return cls.from_mapping(values, source=file)

    def to_mapping(self):
        """The fields, an optional one only when it is not 0 (so a profile
        without it maps as before it existed)."""
        return {name: getattr(self, name) for name in _PROFILE_FIELDS
                if name not in _OPTIONAL or getattr(self, name) != 0}


_PROFILE_FIELDS = tuple(f.name for f in fields(CostProfile))


def _strict_loader():
    """A YAML loader that keeps every scalar as its text (numbers are read
    afterwards as yaml-cpp reads them) and refuses a key set twice, as the
    C++ config loader does."""
    import yaml

    class StrictLoader(yaml.BaseLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key '{key}'", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep)

    return StrictLoader


# The bundled profiles, as core/cost_profile.cpp defines them (docs/HYBRID.md
# derives each); python/tests/test_schedule.py holds them to the CLI's.
_BUNDLED = {
    "h100_7b": {
        "name": "h100_7b", "tile_seconds": 7.5e-5, "token_seconds": 9.7e-5,
        "slot_seconds": 2.0e-3, "kv_bytes_per_token": 131072.0,
        "intra_node_bytes_per_second": 3.6e11, "inter_node_bytes_per_second": 4.0e10,
        "latency_seconds": 1.0e-3, "ranks_per_node": 8,
    },
    "cpu_gloo": {
        "name": "cpu_gloo", "tile_seconds": 2.027e-4, "token_seconds": 0.0,
        "slot_seconds": 6.6e-3, "kv_bytes_per_token": 512.0,
        "intra_node_bytes_per_second": 3.3e9, "inter_node_bytes_per_second": 3.3e9,
        "latency_seconds": 9.0e-4, "ranks_per_node": 8,
    },
    "h100_7b_fa3": {
        "name": "h100_7b_fa3", "tile_seconds": 5.0e-5, "token_seconds": 9.7e-5,
        "slot_seconds": 2.0e-3, "kv_bytes_per_token": 131072.0,
        "intra_node_bytes_per_second": 3.6e11, "inter_node_bytes_per_second": 4.0e10,
        "latency_seconds": 1.0e-3, "ranks_per_node": 8,
    },
    "h100_7b_nccl": {
        "name": "h100_7b_nccl", "tile_seconds": 7.5e-5, "token_seconds": 9.7e-5,
        "slot_seconds": 2.0e-3, "kv_bytes_per_token": 131072.0,
        "intra_node_bytes_per_second": 1.8e11, "inter_node_bytes_per_second": 4.0e10,
        "latency_seconds": 1.0e-3, "ranks_per_node": 8,
    },
}


def bundled_profile_names():
    return list(_BUNDLED)


@dataclass(frozen=True, eq=False)
class ScheduleSlot:
    """One slot: ``group`` (g ranks; plan rank i runs on group[i]) runs the
    pieces ``docs[i]``'s tokens [offsets[i], offsets[i] + lengths[i]) packed in
    that order, sharded by ``positions`` ((g, shard_len), row positions,
    -1 = pad), in ``wave``."""

    slot: int
    group: np.ndarray
    wave: int
    docs: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    positions: Optional[np.ndarray]
    padding: int
    plan: Optional[str]
    # A compact answer's slot (ABI 1.4) that was not expanded: positions is
    # None, ``plan`` its rule and this its shard length.
    rule_shard_len: Optional[int] = None
    # ABI 1.5: the weights the slot's rule takes (per_document_weighted),
    # one per member, or None; expand_slots passes them to plan_cp.
    member_weights: Optional[np.ndarray] = None

    @property
    def tokens(self):
        return int(self.lengths.sum())

    @property
    def compact(self):
        """Whether the plan is by rule, its positions not written."""
        return self.positions is None

    @property
    def rank_tokens(self):
        """Real tokens each member holds."""
        if self.positions is None:
            raise FulcrumError("invalid_argument", f"slot {self.slot}'s plan is by rule "
                               f"({self.plan!r}); expand it (Balancer.expand_slots) first")
        return (self.positions >= 0).sum(axis=1)

    def to_json(self, positions=False):
        out = {
            "slot": self.slot,
            "group": self.group.tolist(),
            "wave": self.wave,
            "documents": [{"doc": int(d), "offset": int(o), "length": int(n)}
                          for d, o, n in zip(self.docs, self.offsets, self.lengths)],
            "plan": self.plan,
        }
        if positions:
            out["positions"] = self.positions.tolist()
        return out


@dataclass(frozen=True, eq=False)
class Schedule:
    """One global batch on ``world`` ranks; the schedule fields of
    ``fulcrum schedule --format json``."""

    requested: str
    used: str
    fallback_reason: Optional[str]
    world: int
    max_tokens_per_rank: int
    doc_lengths: np.ndarray
    slots: List[ScheduleSlot]
    plan_time_us: float
    # What the request asked with, which a plan by rule is expanded with
    # (Balancer.expand_slots); None where the schedule did not come from
    # Balancer.schedule.
    mask: Optional[object] = None
    block_size: Optional[int] = None

    @property
    def num_waves(self):
        return 1 + max((s.wave for s in self.slots), default=-1)

    def check_rank(self, rank):
        """``rank`` as an int, FulcrumError 'invalid_argument' unless it is an
        integer (not a bool) in [0, world)."""
        if isinstance(rank, (bool, np.bool_)) or not isinstance(rank, (int, np.integer)) \
                or not 0 <= rank < self.world:
            raise FulcrumError("invalid_argument", f"rank is {shown(rank, 60)}; give a rank in "
                               f"[0, {self.world})")
        return int(rank)

    def rank_slots(self, rank):
        """The slots rank ``rank`` runs, in the order it runs them (by wave)."""
        rank = self.check_rank(rank)
        return sorted((s for s in self.slots if rank in s.group), key=lambda s: s.wave)

    def to_json(self, positions=False):
        return {
            "requested": self.requested,
            "used": self.used,
            "fallback_reason": self.fallback_reason,
            "world": self.world,
            "max_tokens_per_rank": self.max_tokens_per_rank,
            "slots": [s.to_json(positions) for s in self.slots],
            "plan_time_us": self.plan_time_us,
        }


@dataclass(frozen=True)
class GroupShapes:
    """Which groups a schedule may use (GroupShapes in
    include/fulcrum/schedule_types.h; ABI 1.2): ``sizes`` the allowed group
    sizes, powers of two (empty: any size), ``world`` whether the group of
    all W ranks is allowed too, ``aligned`` that a group of g ranks is ranks
    [k g, (k + 1) g), ``every_wave`` that every rank holds a slot in every
    wave, ``wave_multiple`` that the wave count is a multiple of it. No
    sizes and ``world`` set: only the world group."""

    sizes: tuple = ()
    world: bool = False
    aligned: bool = False
    every_wave: bool = False
    wave_multiple: int = 1

    def __post_init__(self):
        for g in self.sizes:
            if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 1 \
                    or g > 2**20 or g & (g - 1):
                raise FulcrumError("invalid_argument", f"group_shapes size {g!r} is not a power "
                                   "of two in [1, 2^20]")
        m = self.wave_multiple
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or not 1 <= m <= 2**20:
            raise FulcrumError("invalid_argument", f"group_shapes wave_multiple {m!r} must be an "
                               "integer in [1, 2^20]")
        if m > 1 and not self.every_wave:
            raise FulcrumError("invalid_argument", "group_shapes wave_multiple > 1 needs "
                               "every_wave")

    def restricts(self):
        return bool(self.sizes) or self.world or self.aligned or self.every_wave \
            or self.wave_multiple > 1

    def mask(self):
        out = 0
        for g in self.sizes:
            out |= 1 << (int(g).bit_length() - 1)
        return out

    def allows(self, ranks, world):
        """Whether the member list ``ranks`` is an allowed group."""
        g = len(ranks)
        if g < 1:
            return False
        if (self.sizes or self.world) and g not in self.sizes and not (self.world and g == world):
            return False
        if self.aligned:
            first = int(ranks[0])
            if first % g or first + g > world or list(map(int, ranks)) != \
                    list(range(first, first + g)):
                return False
        return True


def check_group_shapes(schedule, shapes, name):
    """Raises FulcrumError naming the first slot or wave that breaks
    ``shapes`` (the check validate_schedule makes in C++)."""
    bad = f"plugin {name!r} scheduler {schedule.used!r} returned a schedule outside the " \
          "requested group shapes: "
    for s in schedule.slots:
        if not shapes.allows(s.group.tolist(), schedule.world):
            raise FulcrumError("internal", bad + f"slot {s.slot} spans ranks "
                               f"{s.group.tolist()}")
    if shapes.every_wave:
        waves = schedule.num_waves
        held = np.zeros((waves, schedule.world), dtype=np.int64)
        for s in schedule.slots:
            held[s.wave, s.group] += 1
        if (held != 1).any():
            wave, rank = map(int, np.argwhere(held != 1)[0])
            raise FulcrumError("internal", bad + f"rank {rank} holds {int(held[wave, rank])} "
                               f"slots in wave {wave}")
        if waves % shapes.wave_multiple:
            raise FulcrumError("internal", bad + f"{waves} waves, not a multiple of "
                               f"{shapes.wave_multiple}")


def schedule_pieces(doc_lengths, world, max_tokens_per_rank):
    """The pieces every schedule places once: a document whole, or cut at
    multiples of W x T when longer (docs/PACKING.md's rule), as
    (doc, offset, length) rows sorted."""
    limit = world * max_tokens_per_rank
    rows = []
    for doc, length in enumerate(doc_lengths.tolist()):
        for offset in range(0, length, limit):
            rows.append((doc, offset, min(limit, length - offset)))
    return rows


def check_schedule(schedule, name):
    """The host's checks (validate_schedule); raises FulcrumError naming the
    first violation."""
    bad = f"plugin {name!r} scheduler {schedule.used!r} returned an invalid schedule: "
    world, budget = schedule.world, schedule.max_tokens_per_rank
    lengths = schedule.doc_lengths
    seen = {}
    placed = []
    for s in schedule.slots:
        where = f"slot {s.slot}"
        g = s.group.size
        if g < 1:
            raise FulcrumError("internal", bad + f"{where} has no ranks")
        if int(s.group.min()) < 0 or int(s.group.max()) >= world:
            raise FulcrumError("internal", bad + f"{where} names a rank outside [0, {world})")
        if np.unique(s.group).size != g:
            raise FulcrumError("internal", bad + f"{where} names a rank twice")
        if s.wave < 0:
            raise FulcrumError("internal", bad + f"{where} has wave {s.wave}")
        for rank in s.group.tolist():
            other = seen.setdefault((rank, s.wave), s.slot)
            if other != s.slot:
                raise FulcrumError("internal", bad + f"rank {rank} runs slots {other} and "
                                   f"{s.slot} in wave {s.wave}")
        if s.docs.size == 0:
            raise FulcrumError("internal", bad + f"{where} runs no document")
        for d, o, n in zip(s.docs.tolist(), s.offsets.tolist(), s.lengths.tolist()):
            if not 0 <= d < lengths.size or n < 1 or o < 0 or o + n > int(lengths[d]):
                raise FulcrumError("internal", bad + f"{where} holds piece (doc {d}, offset "
                                   f"{o}, length {n}), which is not in the batch")
            placed.append((d, o, n))
        row = s.tokens
        if s.compact:
            _check_plan_by_rule(s, row, budget, bad)
            continue
        flat = s.positions.reshape(-1)
        if s.positions.shape[0] != g or flat.size < row:
            raise FulcrumError("internal", bad + f"{where}'s plan does not hold its {row} "
                               f"tokens on {g} ranks")
        real = flat[flat >= 0]
        if (flat < -1).any() or real.size != row or np.unique(real).size != row \
                or (real.size and int(real.max()) >= row):
            raise FulcrumError("internal", bad + f"{where}'s plan is not a permutation of "
                               f"[0, {row}) plus padding")
        if flat.size - row != s.padding:
            raise FulcrumError("internal", bad + f"{where} says {s.padding} pad positions but "
                               f"holds {flat.size - row}")
        heaviest = int(s.rank_tokens.max())
        if heaviest > budget:
            rank = int(s.group[int(s.rank_tokens.argmax())])
            raise FulcrumError("internal", bad + f"{where} gives rank {rank} {heaviest} tokens, "
                               f"over the budget of {budget}")
    if sorted(placed) != schedule_pieces(lengths, world, budget):
        raise FulcrumError("internal", bad + "its pieces do not cover the batch exactly once "
                           "(a document missing, placed twice, or cut elsewhere than at "
                           "multiples of W x T)")


def _check_plan_by_rule(s, row, budget, bad):
    """A compact answer's slot judged without positions: its rule named, its
    shard holding the row within the budget, its padding the rest."""
    g, n = s.group.size, s.rule_shard_len
    where = f"slot {s.slot}"
    if not s.plan:
        raise FulcrumError("internal", bad + f"{where}'s plan is by rule but names no rule")
    if n is None or n * g < row or n > budget:
        raise FulcrumError("internal", bad + f"{where}'s shard length {n} does not hold its "
                           f"{row} tokens on {g} ranks within the budget of {budget}")
    if n * g - row != s.padding:
        raise FulcrumError("internal", bad + f"{where} says {s.padding} pad positions but "
                           f"its shape leaves {n * g - row}")
