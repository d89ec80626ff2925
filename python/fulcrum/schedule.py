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

import math
from dataclasses import dataclass, fields
from typing import List, Optional

import numpy as np

from .errors import FulcrumError

# Largest profile file read, as the C++ loader.
_MAX_PROFILE_BYTES = 1 << 20


@dataclass(frozen=True)
class CostProfile:
    """Coefficients of the step-time cost model (CostProfile in
    include/fulcrum/schedule_types.h); times in seconds, sizes in bytes."""

    name: str
    tile_seconds: float
    token_seconds: float
    slot_seconds: float
    kv_bytes_per_token: float
    intra_node_bytes_per_second: float
    inter_node_bytes_per_second: float
    latency_seconds: float
    ranks_per_node: int

    def __post_init__(self):
        where = f"cost profile {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise FulcrumError("invalid_argument", "cost profile name must be a non-empty string")
        for f in fields(self):
            if f.name == "name":
                continue
            value = getattr(self, f.name)
            if f.name == "ranks_per_node":
                if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                        or not 1 <= value <= 2**31 - 1:
                    raise FulcrumError("invalid_argument", f"{where}: ranks_per_node is {value!r}; "
                                       "it must be an integer >= 1")
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) \
                    or not math.isfinite(value):
                raise FulcrumError("invalid_argument", f"{where}: {f.name} is {value!r}; it must "
                                   "be a finite number")
            positive = f.name in ("kv_bytes_per_token", "intra_node_bytes_per_second",
                                  "inter_node_bytes_per_second")
            if (positive and not value > 0) or value < 0:
                raise FulcrumError("invalid_argument", f"{where}: {f.name} is {value!r}; it must "
                                   f"be {'> 0' if positive else '>= 0'}")

    @classmethod
    def from_mapping(cls, mapping, source="mapping"):
        """A profile from a dict with exactly CostProfile's field names."""
        if not isinstance(mapping, dict):
            raise FulcrumError("invalid_argument", f"cost profile {source} is not a mapping of "
                               f"{', '.join(_PROFILE_FIELDS)}")
        unknown = sorted(set(map(str, mapping)) - set(_PROFILE_FIELDS))
        if unknown:
            raise FulcrumError("invalid_argument", f"cost profile {source} has unknown key "
                               f"{unknown[0]!r}; its keys are {', '.join(_PROFILE_FIELDS)}")
        missing = [name for name in _PROFILE_FIELDS if name not in mapping]
        if missing:
            raise FulcrumError("invalid_argument", f"cost profile {source} does not set "
                               f"{missing[0]}; a profile sets every one of "
                               f"{', '.join(_PROFILE_FIELDS)}")
        return cls(**{name: mapping[name] for name in _PROFILE_FIELDS})

    @classmethod
    def load(cls, path):
        """A profile YAML file, as `fulcrum calibrate` writes and
        `fulcrum schedule --profile FILE` reads (docs/HYBRID.md)."""
        import os
        import stat
        try:
            import yaml
        except ImportError:
            raise FulcrumError("not_found", "reading a profile file needs PyYAML (Debian: "
                               "python3-yaml); or pass the profile as a dict") from None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as error:
            raise FulcrumError("not_found", f"cannot open cost profile {path}: "
                               f"{error.strerror}; check the path") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise FulcrumError("invalid_argument", f"cost profile {path} is not a regular "
                                   "file; give the path of a profile YAML file")
            if info.st_size > _MAX_PROFILE_BYTES:
                raise FulcrumError("invalid_argument", f"cost profile {path} has "
                                   f"{info.st_size} bytes, over the {_MAX_PROFILE_BYTES} a "
                                   "profile may have; is it the right file?")
            with os.fdopen(os.dup(fd), "rb") as handle:
                text = handle.read(_MAX_PROFILE_BYTES + 1)
        finally:
            os.close(fd)
        if b"\0" in text:
            raise FulcrumError("invalid_argument", f"cost profile {path} holds a NUL byte; it "
                               "is not a YAML text file")
        try:
            documents = list(yaml.safe_load_all(text))
        except yaml.YAMLError as error:
            line = str(error).splitlines()[0] if str(error) else "malformed YAML"
            raise FulcrumError("invalid_argument", f"cost profile {path}: {line}") from None
        if len(documents) != 1:
            raise FulcrumError("invalid_argument", f"cost profile {path} holds "
                               f"{len(documents)} YAML documents; write exactly one mapping")
        mapping = documents[0]
        if isinstance(mapping, dict):
            # PyYAML follows YAML 1.1, where 3.3e9 (no dot or exponent sign)
            # is a string; yaml-cpp, which reads profiles for the C++ side,
            # takes it as a number. Read such scalars as numbers here too.
            mapping = {key: _yaml_number(value) if key != "name" else value
                       for key, value in mapping.items()}
        return cls.from_mapping(mapping, source=str(path))

    def to_mapping(self):
        return {name: getattr(self, name) for name in _PROFILE_FIELDS}


_PROFILE_FIELDS = tuple(f.name for f in fields(CostProfile))


def _yaml_number(value):
    if not isinstance(value, str):
        return value
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() and "." not in value and "e" not in value.lower() \
        else number


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
    positions: np.ndarray
    padding: int
    plan: Optional[str]

    @property
    def tokens(self):
        return int(self.lengths.sum())

    @property
    def rank_tokens(self):
        """Real tokens each member holds."""
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

    @property
    def num_waves(self):
        return 1 + max((s.wave for s in self.slots), default=-1)

    def rank_slots(self, rank):
        """The slots rank ``rank`` runs, in the order it runs them (by wave)."""
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
