"""Balancer.schedule: one global batch placed on the ranks through the ABI
1.1 schedule hook, the plugin's flat answer copied into per-slot arrays and
checked as the host checks a schedule."""

import ctypes
import dataclasses
import time

import numpy as np

from . import _abi
from . import schedule as schedule_model
from . import work as work_model
from ._c_values import _INT32, _INT64, _MASK_KINDS, _MAX_NAME_BYTES, _MAX_TEXT_BYTES, _Lent
from ._c_values import _address, _c_int, _c_text, _int64_array, _member_weights
from .errors import FulcrumError

# Counts past these in a schedule answer mean a corrupt answer, not a big batch.
_MAX_SLOTS = 1 << 24
_MAX_PIECES = 1 << 40


class Scheduling:
    """Balancer.schedule and the copy of its answer; a part of Balancer."""

    def schedule(self, strategy="hybrid", *, world, max_tokens_per_rank, doc_lengths, profile,
                 mask="causal", block_size=128, cp=0, group_shapes=None, compact_rank=None):
        """Places one global batch of documents on ``world`` ranks (the ABI 1.1
        schedule hook; docs/HYBRID.md). ``profile`` is a schedule.CostProfile,
        a dict of its fields, a bundled profile's name (h100_7b, h100_7b_fa3,
        h100_7b_nccl, cpu_gloo) or the path of a profile YAML file, as the
        CLI's --profile. ``cp`` is
        the `fixed` scheduler's group size (0: it chooses). The schedule is
        checked as the host checks it before it is returned. A plugin without
        a scheduler (ABI 1.0) raises FulcrumError 'unsupported': the C++
        host serves its built-in fixed schedule there, a Python caller
        decides. ``group_shapes`` (a schedule.GroupShapes, ABI 1.2)
        restricts the groups; a plugin older than 1.2 would not see it, so
        it raises 'unsupported' there. ``compact_rank`` (ABI 1.4): ask for
        the compact answer and write the positions of that rank's slots only
        (expand_slots); the others keep positions None and their rule. A
        plugin older than 1.4 answers in full, which is returned as it is."""
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

        if compact_rank is not None:
            compact_rank = _c_int(compact_rank, "compact_rank", _INT32)
            if not 0 <= compact_rank < world:
                raise FulcrumError("invalid_argument", f"compact_rank is {compact_rank}; give a "
                                   f"rank in [0, {world})")

        lent = _Lent()
        request = _schedule_request(lent, strategy, world, budget, docs, mask, cp, block_size,
                                    profile, group_shapes if shaped else None,
                                    compact_rank is not None)
        (used, reason, slots), elapsed_us = self._call_schedule(request, lent, world, budget,
                                                                docs, strategy)
        result = schedule_model.Schedule(
            requested=strategy, used=used or strategy, fallback_reason=reason, world=world,
            max_tokens_per_rank=budget, doc_lengths=docs, slots=slots, plan_time_us=elapsed_us,
            mask=mask, block_size=block_size)
        schedule_model.check_schedule(result, self.name)
        if shaped:
            schedule_model.check_group_shapes(result, group_shapes, self.name)
        if compact_rank is not None:
            result = self.expand_slots(result, compact_rank, mask=mask, block_size=block_size)
        return result

    def expand_slots(self, schedule, rank=None, *, mask=None, block_size=None):
        """``schedule`` with the plans by rule of ``rank``'s slots (every slot:
        None) written, each the plan this plugin's plan_cp gives for the
        slot's rule on its row (its pieces as documents; ``mask`` and
        ``block_size`` those the schedule was asked with, which it records:
        None takes them, another value is refused, as a rule plans another
        row under another mask; a schedule that records none takes causal and
        128 by default), which must hold the shape the answer stated:
        FulcrumError 'internal' naming the plugin, the slot and its rule
        otherwise."""
        if not isinstance(schedule, schedule_model.Schedule):
            raise FulcrumError("invalid_argument", "schedule must be a fulcrum.schedule.Schedule "
                               f"(as Balancer.schedule returns), not {type(schedule).__name__}")
        if rank is not None:
            rank = schedule.check_rank(rank)
        mask, block_size = _expansion_settings(schedule, mask, block_size)
        slots = []
        for s in schedule.slots:
            if s.compact and (rank is None or rank in s.group.tolist()):
                s = self._expand_slot(schedule, s, mask, block_size)
            slots.append(s)
        return dataclasses.replace(schedule, slots=slots)

    def _expand_slot(self, schedule, s, mask, block_size):
        bad = (f"plugin {self.name!r} scheduler {schedule.used!r}: slot {s.slot} (CP rule "
               f"{s.plan!r} on {s.group.size} rank{'s' if s.group.size > 1 else ''}) ")
        try:
            plan = self.plan_cp(s.plan, cp=int(s.group.size), doc_lengths=s.lengths,
                                block_size=block_size, mask=mask, fallback=None,
                                member_weights=s.member_weights)
        except FulcrumError as e:
            raise FulcrumError("internal", bad + f"cannot be expanded: {e}; fix the plugin: a plan "
                               "by rule must name a CP strategy that plans the slot's row") from None
        for what, said, got in (("shard_len", s.rule_shard_len, plan.shard_len),
                                ("padding", s.padding, plan.padding)):
            if said != got:
                raise FulcrumError("internal", bad + f"expanded to a plan with {what} {got}, "
                                   f"the schedule said {said}")
        return dataclasses.replace(s, positions=plan.positions.copy(), plan=plan.used,
                                   rule_shard_len=None)

    def _call_schedule(self, request, lent, world, budget, docs, strategy):
        """The schedule hook called under the lock and its answer copied and
        released; ((used, reason, slots), microseconds)."""
        answer = _abi.ScheduleAnswer()
        answer.struct_size = ctypes.sizeof(answer)
        compact_asked = bool(request.answer_flags & _abi.ANSWER_COMPACT)
        start = time.perf_counter_ns()
        with self._lock:
            instance = self._live_instance()
            status = self._table.schedule(instance, ctypes.byref(request), ctypes.byref(answer))
            try:
                self._check_lent(lent, "scheduler", strategy)
                if status != _abi.OK:
                    raise self._failure(status, strategy)
                copied = self._copy_schedule(answer, world, budget, docs, strategy,
                                             compact_asked)
            finally:
                # Exactly once for every FULCRUM_OK, however the copy ended.
                if status == _abi.OK:
                    self._table.release_schedule(instance, ctypes.byref(answer))
        elapsed_us = (time.perf_counter_ns() - start) / 1000.0
        return copied, elapsed_us

    def _copy_schedule(self, answer, world, budget, docs, strategy, compact_asked=False):
        """Copies the plugin's flat arrays into per-slot NumPy arrays, checking
        every count before it is used as a length, against what the batch
        allows: no more slots than pieces, no shard longer than the batch
        plus the budget."""
        bad = f"plugin {self.name!r} scheduler {strategy!r} returned an invalid schedule: "
        # A document longer than W x T is cut in pieces of W x T.
        num_pieces = sum(-(-length // (world * budget)) for length in docs.tolist())
        batch_tokens = sum(docs.tolist())
        flags = answer.answer_flags
        if flags & ~_abi.ANSWER_COMPACT or (flags and not compact_asked):
            raise FulcrumError("internal", bad + f"answer_flags {flags} is not an answer this "
                               "call asked for")
        compact = bool(flags)
        if compact and answer.positions:
            raise FulcrumError("internal", bad + "a compact answer with positions; its plans are "
                               "by rule and positions must be NULL")
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
        positions = None if compact else copy(answer.positions, int(position_ends[-1]), np.int64,
                                              "positions")
        plans = [None] * count
        if compact and count and not answer.slot_plan_strategies:
            raise FulcrumError("internal", bad + "a compact answer needs slot_plan_strategies, "
                               "and it is null")
        if answer.slot_plan_strategies and count:
            raw = (ctypes.c_void_p * count).from_address(_address(answer.slot_plan_strategies))
            plans = [self._answer_text(p, _MAX_NAME_BYTES, bad, f"slot_plan_strategies[{s}]")
                     for s, p in enumerate(raw)]
        weights = _weights_of_slots(answer, compact, sizes, copy, bad)
        slots = []
        for s in range(count):
            g, n = int(sizes[s]), int(shard_lens[s])
            p0, p1 = int(piece_offsets[s]), int(piece_offsets[s + 1])
            slots.append(schedule_model.ScheduleSlot(
                slot=s, group=ranks[rank_offsets[s]:rank_offsets[s + 1]].copy(),
                wave=int(waves[s]), docs=piece_docs[p0:p1].copy(),
                offsets=piece_starts[p0:p1].copy(), lengths=piece_lengths[p0:p1].copy(),
                positions=None if compact else
                positions[position_ends[s]:position_ends[s + 1]].reshape(g, n).copy(),
                padding=int(padding[s]), plan=plans[s], rule_shard_len=n if compact else None,
                member_weights=weights[s]))
        used = self._answer_text(answer.strategy_used, _MAX_NAME_BYTES, bad, "strategy_used")
        reason = self._answer_text(answer.fallback_reason, _MAX_TEXT_BYTES, bad, "fallback_reason")
        return used, reason, slots


def _expansion_settings(schedule, mask, block_size):
    """The mask and block size a schedule's rules are expanded with: those it
    was asked with where it records them (a different one given is refused),
    else those given, else causal and 128."""
    asked = ((schedule.mask, mask, "mask", "causal", work_model.Mask.parse),
             (schedule.block_size, block_size, "block_size", 128,
              lambda v: _c_int(v, "block_size", _INT64)))
    out = []
    for recorded, given, what, default, parse in asked:
        value = parse(given) if given is not None else None
        if recorded is not None and value is not None and value != recorded:
            raise FulcrumError("invalid_argument", f"{what} is {given!r} but the schedule was "
                               f"asked with {recorded!r}; leave {what} out to expand its rules "
                               "as they were answered")
        out.append(recorded if recorded is not None else
                   value if value is not None else parse(default))
    return tuple(out)


def _weights_of_slots(answer, compact, sizes, copy, bad):
    """Each slot's member weights (ABI 1.5) from the answer, or None per slot:
    only with a compact answer, none or one per member, each finite and >= 0
    and summing above 0; FulcrumError 'internal' naming the slot otherwise."""
    count = sizes.size
    if not answer.slot_weight_offsets and not answer.slot_weights:
        return [None] * count
    if not answer.slot_weight_offsets or not answer.slot_weights:
        raise FulcrumError("internal", bad + "slot_weight_offsets and slot_weights must be both "
                           "NULL or both set")
    if not compact:
        raise FulcrumError("internal", bad + "a full answer with member weights; weights come "
                           "only with plans by rule")
    # Python integers: NumPy's difference of int64 offsets would wrap.
    offsets = copy(answer.slot_weight_offsets, count + 1, np.int64, "slot_weight_offsets").tolist()
    if offsets[0] != 0:
        raise FulcrumError("internal", bad + f"slot_weight_offsets[0] is {offsets[0]}, not 0")
    counts = []
    for s in range(count):
        begin, end = offsets[s], offsets[s + 1]
        if end < begin:
            raise FulcrumError("internal", bad + f"slot {s}: slot_weight_offsets [{begin}, {end}) "
                               "go backwards; they must be non-decreasing from 0")
        if end - begin not in (0, int(sizes[s])):
            raise FulcrumError("internal", bad + f"slot {s}: slot_weight_offsets give "
                               f"{end - begin} member weights for {int(sizes[s])} members; give "
                               "none or one per member")
        counts.append(end - begin)
    values = copy(answer.slot_weights, int(offsets[-1]), np.float64, "slot_weights")
    out = []
    for s in range(count):
        if counts[s] == 0:
            out.append(None)
            continue
        try:
            out.append(_member_weights(values[offsets[s]:offsets[s + 1]], int(sizes[s])))
        except FulcrumError as error:
            raise FulcrumError("internal", bad + f"slot {s}: {error.message}") from None
    return out


def _schedule_request(lent, strategy, world, budget, docs, mask, cp, block_size, profile, shapes,
                      compact=False):
    """The fulcrum_schedule_request of a checked call, its arrays and text
    lent through ``lent``; ``shapes`` None when the groups are not
    restricted; ``compact``: the compact answer asked for (ABI 1.4)."""
    request = _abi.ScheduleRequest()
    request.struct_size = ctypes.sizeof(request)
    request.answer_flags = _abi.ANSWER_COMPACT if compact else 0
    if shapes is not None:
        request.group_sizes = shapes.mask()
        request.group_flags = ((_abi.GROUPS_WORLD if shapes.world else 0)
                               | (_abi.GROUPS_ALIGNED if shapes.aligned else 0)
                               | (_abi.GROUPS_EVERY_WAVE if shapes.every_wave else 0))
        request.wave_multiple = shapes.wave_multiple
    request.world_size = world
    request.max_tokens_per_rank = budget
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
    return request
