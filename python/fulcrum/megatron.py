"""fulcrum as a drop-in for Megatron-core's dynamic context parallelism.

Megatron-core's sequence-packing path (megatron/core/datasets/data_schedule.py)
asks a scheduler object for ``get_groups_and_subsamples(sample_id_seqlens)``:
given every sample of the global batch as ``(global id, padded length)``, it
answers ``sample_id_groups[microbatch][dp_cp_rank] = [sample ids]``. Ranks
holding the same ids in a micro-batch form one CP group of that micro-batch;
Megatron then moves the samples to their ranks, packs each rank's list into
one THD row per micro-batch, and looks up the group's communicator by its
size among the process groups built at start-up.

This module answers the same question two ways (docs/INTEGRATION.md):

- ``strategy="megatron_dcp"``: what Megatron's ``DefaultDynamicCPScheduler``
  answers, exactly, including where it fails (re-expressed here from
  Megatron-LM's dev branch, the commit named in docs/INTEGRATION.md).
- ``strategy="hybrid"``: a placement priced by fulcrum's cost model whose
  groups are all ones Megatron's runtime holds (see ``megatron_group_sizes``)
  and which satisfies what Megatron's code asserts downstream.

``DynamicCPScheduler`` takes the constructor arguments of Megatron's class, so
``scheduler_map["default_dynamic_cp"] = DynamicCPScheduler`` switches it.
"""

import math
import operator
from typing import List, Optional, Sequence, Tuple

from .errors import FulcrumError

# Megatron widens the per-micro-batch workload cap by this fraction over
# (longest sample x per-rank budget).
_CAP_SLACK = 0.05


class MegatronDcpAssertion(FulcrumError, AssertionError):
    """Raised where Megatron's scheduler fails an assertion on the same input
    (a sample longer than the whole DP x CP world can hold, a micro-batch the
    virtual-pipeline alignment cannot split). It is an AssertionError, as
    Megatron's, and a FulcrumError."""

    def __init__(self, message):
        super().__init__("invalid_argument", message)


class MegatronDcpIndexError(FulcrumError, IndexError):
    """Raised where Megatron's scheduler indexes past the last rank (its
    empty-rank filling at some non-power-of-two DP x CP sizes). An
    IndexError, as Megatron's, and a FulcrumError."""

    def __init__(self, message):
        super().__init__("unsupported", message)


# -- Megatron's process groups -------------------------------------------------


def megatron_group_sizes(world, min_cp_size=1):
    """The CP group sizes Megatron-core's runtime can run at DP x CP = world
    with dynamic CP: the powers of two 2^i for i < floor(log2(world)) that are
    at least ``min_cp_size``, and the whole world. A group of size g < world
    is the aligned block of ranks [k g, (k + 1) g); a block that would run
    past the last rank is built but never looked up under its own size, so
    it is not offered. Megatron refuses an odd world for dynamic CP."""
    sizes = []
    exponent = 0
    limit = int(math.log2(world)) if world >= 1 else 0
    while exponent < limit:
        if 2**exponent >= min_cp_size:
            sizes.append(2**exponent)
        exponent += 1
    if world not in sizes:
        sizes.append(world)
    return sizes


def group_is_megatron_group(ranks, world, min_cp_size=1):
    """Whether the sorted rank list ``ranks`` is a communicator Megatron's
    runtime finds when a member looks up its group by the group's size."""
    g = len(ranks)
    if g == world:
        return list(ranks) == list(range(world))
    if g not in megatron_group_sizes(world, min_cp_size):
        return False
    first = ranks[0]
    return first % g == 0 and first + g <= world and list(ranks) == list(range(first, first + g))


# -- megatron_dcp: Megatron's DefaultDynamicCPScheduler, exactly -------------


def _min_group(length, budget, min_cp):
    """Smallest power-of-two group that holds ``length`` at ``budget`` tokens
    per rank (Megatron computes it through a float log2; so do we, so that
    the rounding agrees), raised to ``min_cp``."""
    need = 2 ** math.ceil(math.log2(length / budget))
    return max(min_cp, max(1, need))


class _Micro:
    """One micro-batch under construction: groups of consecutive ranks, each
    rank's ids and predicted attention work (length^2 / group size summed)."""

    def __init__(self, world):
        self.world = world
        self.ids = [[] for _ in range(world)]
        self.work = [0.0] * world
        self.groups = []  # [size, first rank, per-rank packed length], creation order
        self.used = 0  # ranks [0, used) belong to some group

    def worst_with(self, ranks, cost):
        # The largest rank work if `cost` is added to every rank in `ranks`
        # (a range), evaluated as Megatron does: t + cost for members, t else.
        best = None
        for r, t in enumerate(self.work):
            value = t + cost if ranks.start <= r < ranks.stop else t
            if best is None or value > best:
                best = value
        return best

    def place(self, sample, length, ranks, cost):
        for r in ranks:
            self.ids[r].append(sample)
            self.work[r] += cost


def _dcp_micro_batch(pending, world, budget, min_cp):
    """Fills one micro-batch from ``pending`` (sorted longest first); returns
    (per-rank id lists, what is left for later micro-batches)."""
    pending = sorted(pending, key=lambda item: item[1], reverse=True)
    micro = _Micro(world)
    first_id, first_len = pending[0]
    size = _min_group(first_len, budget, min_cp)
    if size > world:
        raise MegatronDcpAssertion(
            f"sample {first_id} of {first_len} tokens needs a CP group of {size} ranks at "
            f"max_seqlen_per_dp_cp_rank = {budget}, over the {world} DP x CP ranks; raise "
            "max_seqlen_per_dp_cp_rank or shorten the sample (Megatron asserts here too)")
    cap = float(first_len) * float(budget) * (1.0 + _CAP_SLACK)
    first_cost = (first_len * first_len) / size
    micro.groups.append([size, 0, first_len / size])
    micro.used = size
    micro.place(first_id, first_len, range(0, size), first_cost)

    later = []
    for sample, length in pending[1:]:
        choice = None  # (worst work, group index or None for a new group, size)
        size = _min_group(length, budget, min_cp)
        while size <= world:
            cost = (length * length) / size
            for index, (g, start, packed) in enumerate(micro.groups):
                if g != size or packed + length / size > budget:
                    continue
                worst = micro.worst_with(range(start, start + g), cost)
                if worst <= cap and (choice is None or worst < choice[0]):
                    choice = (worst, index, size)
            if world - micro.used >= size:
                worst = micro.worst_with(range(micro.used, micro.used + size), cost)
                if worst <= cap and (choice is None or worst < choice[0]):
                    choice = (worst, None, size)
            size *= 2
        if choice is None:
            later.append((sample, length))
            continue
        _, index, size = choice
        cost = (length * length) / size
        if index is None:
            micro.groups.append([size, micro.used, length / size])
            micro.place(sample, length, range(micro.used, micro.used + size), cost)
            micro.used += size
        else:
            group = micro.groups[index]
            group[2] += length / size
            micro.place(sample, length, range(group[1], group[1] + size), cost)

    ids = micro.ids
    while any(not rank_ids for rank_ids in ids):
        grown = _grow_smallest_group(ids, micro.groups, world)
        if grown is None:
            # Megatron's last resort: the whole world as one group, holding
            # every pending sample (longest first) whose share still fits.
            chosen, later, share = [], [], 0.0
            for sample, length in pending:
                if share + length / world <= budget:
                    chosen.append(sample)
                    share += length / world
                else:
                    later.append((sample, length))
            if not chosen:
                raise MegatronDcpAssertion(
                    f"no pending sample fits the whole group of {world} ranks at "
                    f"max_seqlen_per_dp_cp_rank = {budget}; raise it (Megatron asserts here too)")
            ids = [list(chosen) for _ in range(world)]
            break
        ids = grown
    return ids, later


def _grow_smallest_group(ids, groups, world):
    """Megatron's empty-rank filling, one step: the first group of the
    smallest size that can grow to the next size (twice as large, at most
    the world) without running past the last rank takes the ranks after it,
    and every later group moves up by as many ranks. Returns the new id
    lists, or None when no group can grow. ``groups`` is updated in place."""
    empty = [r for r, rank_ids in enumerate(ids) if not rank_ids]
    first_empty = empty[0]
    smallest = min(g for g, _, _ in groups)
    target = min(2 * smallest, world)
    extra = target - smallest
    for group in groups:
        g, start, _ = group
        if g != smallest:
            continue
        last = start + g - 1
        if last + 1 > first_empty or last + extra >= world:
            continue
        moved = ids[last + 1:first_empty]
        if moved and first_empty - 1 + extra >= world:
            raise MegatronDcpIndexError(
                f"Megatron's empty-rank filling grows the group at ranks [{start}, {last}] to "
                f"{target} ranks and moves ranks [{last + 1}, {first_empty - 1}] up by "
                f"{extra}, past the last of {world} ranks (Megatron raises IndexError here); "
                "use a power-of-two DP x CP or strategy='hybrid'")
        out = [list(rank_ids) for rank_ids in ids[:start]]
        out += [list(ids[last]) for _ in range(start, last + extra + 1)]
        out += [list(rank_ids) for rank_ids in moved]
        out += [[] for _ in range(len(out), world)]
        for other in groups:
            if other is not group and other[1] > last:
                other[1] += extra
        group[0] = target
        return out
    return None


def _runs(group):
    """Sizes of the runs of consecutive ranks sharing their first id."""
    sizes = []
    r = 0
    while r < len(group):
        first = group[r][0]
        n = 0
        while r + n < len(group) and first in group[r + n]:
            n += 1
        sizes.append(n)
        r += n
    return sizes


def _double_run(group, start, size, used):
    """The run of ``size`` ranks at ``start`` is copied onto the next
    ``size`` ranks, and ranks [start + size, used) move up by ``size``, as
    Megatron's two slice assignments do it. When the run is longer than the
    empty tail the list comes out longer than the world (Megatron's does
    too; the ranks past the world are never read)."""
    out = list(group)
    tail = group[start + size:used]
    empty = len(group) - used
    stop = used + size if size < empty else None
    out[start + 2 * size:stop] = tail
    out[start + size:start + 2 * size] = out[start:start + size]
    return out


def _fill_by_doubling(group):
    """Megatron's refill of a half micro-batch: while the last rank is empty,
    double the first run of the smallest size at the tail (scanning from the
    last occupied rank back), or, when every run has one size, the first run
    if it fits into the empty ranks."""
    while not group[-1]:
        used = sum(1 for rank_ids in group if rank_ids)
        sizes = _runs(group[:used])
        starts = [sum(sizes[:k]) for k in range(len(sizes))]
        changed = False
        for k in range(len(sizes) - 1, 0, -1):
            if sizes[k - 1] > sizes[k]:
                group = _double_run(group, starts[k], sizes[k], used)
                changed = True
                break
        else:
            if sizes[0] <= len(group) - used:
                group = _double_run(group, 0, sizes[0], used)
                changed = True
        if not changed:
            # Megatron loops forever here; say so instead.
            raise MegatronDcpAssertion(
                f"the virtual-pipeline alignment cannot refill a half micro-batch whose runs "
                f"are {sizes} on {len(group)} ranks (Megatron's align_sample_id_groups does "
                "not terminate on it); use a power-of-two DP x CP or strategy='hybrid'")
    return group


def _split_micro_batch(group):
    """Megatron's split of one micro-batch in two for the virtual-pipeline
    alignment: at the first run boundary at or past the middle rank; each half
    refilled by doubling runs. Returns (back half, front half), or None when
    the micro-batch is one group."""
    world = len(group)
    sizes = _runs(group)
    for k in range(1, len(sizes)):
        if sizes[k] > sizes[k - 1]:
            raise MegatronDcpAssertion(
                f"a micro-batch's CP groups grow from {sizes[k - 1]} to {sizes[k]} ranks "
                "along the ranks; Megatron's virtual-pipeline alignment asserts that they "
                "do not (use strategy='hybrid')")
    if len(sizes) == 1:
        return None
    cut = 0
    for size in sizes:
        if cut >= world // 2:
            break
        cut += size
    front = group[:cut] + [[] for _ in range(world - cut)]
    back = group[cut:] + [[] for _ in range(cut)]
    front = _fill_by_doubling(front)
    return _fill_by_doubling(back), front


def _align_micro_batches(groups, multiple):
    """Megatron's virtual-pipeline alignment: split micro-batches, from the
    last one back (and round again), until their count is a multiple of
    ``multiple``; the front half stays in place, the back half is appended."""
    missing = (-len(groups)) % multiple
    index = len(groups) - 1
    failures = 0
    while missing > 0:
        if index < 0:
            if failures >= len(groups):
                raise MegatronDcpAssertion(
                    f"{len(groups)} micro-batches cannot be split into a multiple of "
                    f"microbatch_group_size_per_vp_stage = {multiple} (every micro-batch is "
                    "one CP group; Megatron asserts here too)")
            index = len(groups) - 1
        halves = _split_micro_batch(groups[index])
        if halves is None:
            failures += 1
        else:
            groups[index] = halves[0]
            groups.append(halves[1])
            missing -= 1
            failures = 0
        index -= 1
    return groups


def megatron_dcp(sample_id_seqlens, world, max_seqlen_per_dp_cp_rank, min_cp_size=1,
                 microbatch_group_size_per_vp_stage=None):
    """Megatron's ``DefaultDynamicCPScheduler.get_groups_and_subsamples``."""
    pending = sorted(sample_id_seqlens, key=lambda item: item[1], reverse=True)
    groups = []
    while pending:
        ids, pending = _dcp_micro_batch(pending, world, max_seqlen_per_dp_cp_rank, min_cp_size)
        groups.append(ids)
    multiple = microbatch_group_size_per_vp_stage
    if multiple is not None and multiple > 1:
        groups = _align_micro_batches(groups, multiple)
    return groups


# -- the public entry points -------------------------------------------------

_STRATEGIES = ("hybrid", "megatron_dcp")


def _integer(value):
    """``value`` as an int when it is an integer (numpy's too), else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _check_args(sample_id_seqlens, max_seqlen_per_dp_cp_rank, dp_size, cp_size, strategy,
                microbatch_group_size_per_vp_stage, min_cp_size):
    for value, name in ((max_seqlen_per_dp_cp_rank, "max_seqlen_per_dp_cp_rank"),
                        (dp_size, "dp_size"), (cp_size, "cp_size"), (min_cp_size, "min_cp_size")):
        if _integer(value) is None or value < 1:
            raise FulcrumError("invalid_argument", f"{name} is {value!r}; it must be an "
                               "integer >= 1")
    if dp_size * cp_size > 2**20:
        raise FulcrumError("invalid_argument", f"dp_size x cp_size is {dp_size * cp_size}, "
                           "over the 2^20 ranks fulcrum schedules")
    vpp = microbatch_group_size_per_vp_stage
    if vpp is not None and (_integer(vpp) is None or vpp < 1):
        raise FulcrumError("invalid_argument", f"microbatch_group_size_per_vp_stage is {vpp!r}; "
                           "give None or an integer >= 1")
    if strategy not in _STRATEGIES:
        raise FulcrumError("not_found", f"strategy {strategy!r} is not one of "
                           f"{', '.join(_STRATEGIES)}")
    rows = []
    seen = set()
    try:
        items = list(sample_id_seqlens)
    except TypeError:
        raise FulcrumError("invalid_argument", "sample_id_seqlens must be a list of "
                           "(sample id, padded length) pairs") from None
    for position, item in enumerate(items):
        try:
            sample, length = item
        except (TypeError, ValueError):
            raise FulcrumError("invalid_argument", f"sample_id_seqlens[{position}] is {item!r}; "
                               "each entry is a (sample id, padded length) pair") from None
        length = _integer(length)
        if length is None or length < 1:
            raise FulcrumError("invalid_argument", f"sample_id_seqlens[{position}] has length "
                               f"{length!r}; lengths are integers >= 1 (Megatron drops empty "
                               "samples before scheduling)")
        length = int(length)
        if sample in seen:
            raise FulcrumError("invalid_argument", f"sample_id_seqlens[{position}] repeats "
                               f"sample id {sample!r}; ids are unique")
        seen.add(sample)
        rows.append((sample, length))
    return rows


def get_groups_and_subsamples(sample_id_seqlens: Sequence[Tuple[int, int]], *,
                              max_seqlen_per_dp_cp_rank: int, dp_size: int, cp_size: int,
                              strategy: str = "hybrid", profile=None,
                              microbatch_group_size_per_vp_stage: Optional[int] = None,
                              min_cp_size: int = 1, balancer=None) -> List[List[List[int]]]:
    """``sample_id_groups[microbatch][dp_cp_rank] = [sample ids]`` for one
    global batch, as Megatron-core's dynamic-CP schedulers answer it.

    ``sample_id_seqlens`` is Megatron's list of (global id, padded length).
    ``strategy="megatron_dcp"`` is Megatron's own scheduler, exactly;
    ``"hybrid"`` is fulcrum's placement restricted to the groups Megatron's
    runtime has (``profile``: a bundled profile name, a CostProfile or a
    profile file, default ``h100_7b``; ``balancer``: a loaded
    ``fulcrum.Balancer``, default ``fulcrum.load()``)."""
    rows = _check_args(sample_id_seqlens, max_seqlen_per_dp_cp_rank, dp_size, cp_size, strategy,
                       microbatch_group_size_per_vp_stage, min_cp_size)
    world = dp_size * cp_size
    if strategy == "megatron_dcp":
        if not rows:
            return []
        return megatron_dcp(rows, world, max_seqlen_per_dp_cp_rank, min_cp_size,
                            microbatch_group_size_per_vp_stage)
    from . import megatron_hybrid
    return megatron_hybrid.schedule(rows, world=world, budget=max_seqlen_per_dp_cp_rank,
                                    min_cp_size=min_cp_size,
                                    multiple=microbatch_group_size_per_vp_stage,
                                    profile=profile, balancer=balancer)


class DynamicCPScheduler:
    """Megatron-core's ``DefaultDynamicCPScheduler`` with fulcrum's
    placement: the same constructor (``max_seqlen_per_dp_cp_rank, cp_size,
    dp_size, microbatch_group_size_per_vp_stage, max_num_seqs=None,
    min_cp_size=1``) and ``get_groups_and_subsamples(sample_id_seqlens)``,
    plus fulcrum's ``strategy``, ``profile`` and ``balancer`` keywords.
    ``megatron_scheduler_class()`` gives a subclass of Megatron's own class
    (so its ``run`` is inherited) when Megatron-core is importable."""

    is_dynamic_cp = True

    def __init__(self, max_seqlen_per_dp_cp_rank, cp_size, dp_size,
                 microbatch_group_size_per_vp_stage, max_num_seqs=None, min_cp_size=1, *,
                 strategy="hybrid", profile=None, balancer=None):
        self.max_seqlen_per_dp_cp_rank = max_seqlen_per_dp_cp_rank
        self.max_seq_len_per_rank = max_seqlen_per_dp_cp_rank
        self.cp_size = cp_size
        self.dp_size = dp_size
        self.total_hdp_gpus = dp_size * cp_size
        self.microbatch_group_size_per_vp_stage = microbatch_group_size_per_vp_stage
        self.max_num_seqs = max_num_seqs  # unused by Megatron's dynamic-CP scheduler too
        self.min_cp_size = min_cp_size
        self.strategy = strategy
        self.profile = profile
        self.balancer = balancer

    def get_groups_and_subsamples(self, sample_id_seqlens):
        return get_groups_and_subsamples(
            sample_id_seqlens, max_seqlen_per_dp_cp_rank=self.max_seqlen_per_dp_cp_rank,
            dp_size=self.dp_size, cp_size=self.cp_size, strategy=self.strategy,
            profile=self.profile,
            microbatch_group_size_per_vp_stage=self.microbatch_group_size_per_vp_stage,
            min_cp_size=self.min_cp_size, balancer=self.balancer)


def megatron_scheduler_class(strategy="hybrid", profile=None, balancer=None):
    """A class to put in Megatron's ``scheduler_map``: a subclass of
    Megatron-core's ``DefaultDynamicCPScheduler`` (its ``run`` moves and
    packs the samples) whose ``get_groups_and_subsamples`` is fulcrum's."""
    from megatron.core.datasets.data_schedule import DefaultDynamicCPScheduler as base

    def groups(self, sample_id_seqlens):
        return get_groups_and_subsamples(
            sample_id_seqlens, max_seqlen_per_dp_cp_rank=self.max_seqlen_per_dp_cp_rank,
            dp_size=self.dp_size, cp_size=self.cp_size, strategy=strategy, profile=profile,
            microbatch_group_size_per_vp_stage=self.microbatch_group_size_per_vp_stage,
            min_cp_size=self.min_cp_size, balancer=balancer)

    return type("FulcrumDynamicCPScheduler", (base,),
                {"get_groups_and_subsamples": groups})
