"""fulcrum.megatron with strategy="megatron_dcp" answers what Megatron-core's
DefaultDynamicCPScheduler answers (Megatron-LM dev, the commit named in
docs/INTEGRATION.md): on the inputs and expected outputs of Megatron's own
unit tests (tests/unit_tests/test_sequence_packing.py), on cases worked by
hand from Megatron's code, and on random batches against `reference`, a
second, separate re-expression of Megatron's algorithm kept in this file
(it shares no code with fulcrum/megatron.py). The last tests hold the
plugin's C++ megatron_dcp (on raw lengths, which it pads as Megatron's
dataset does) to the same answers, and to falling back with Megatron's
reason exactly where Megatron fails; they need the plugin."""

import math
import random

import pytest

from fulcrum import megatron
from fulcrum.errors import FulcrumError


class ReferenceLoops(Exception):
    """Megatron's align_sample_id_groups would never return on this input."""


# -- the reference: Megatron's scheduler, step by step ------------------------


def ref_needed_gpus(seq_len, per_rank, min_cp):
    raw = max(1, 2 ** math.ceil(math.log2(seq_len / per_rank)))
    return max(min_cp, raw)


def ref_one_group(items, total, per_rank, min_cp):
    """One micro-batch, the way Megatron's next_hdp_group_packing_aware forms
    it; returns (sample ids per rank, leftover (id, length) pairs).

    Over 80 lines on purpose: it re-expresses that one Megatron function step
    for step, as the independent reference the plugin's scheduler is checked
    against, so it is kept in one piece that reads beside the original."""
    items = sorted(items, key=lambda pair: pair[1], reverse=True)
    cap = float(items[0][1]) * float(per_rank) * (1.0 + 0.05)
    lens_on = [[] for _ in range(total)]
    busy = [0.0 for _ in range(total)]
    ids_on = [[] for _ in range(total)]
    owner = [None] * total
    members_of = {}
    size_of = {}
    fill_of = {}

    def add(rank_list, sid, length, gid, size):
        for r in rank_list:
            owner[r] = gid
            lens_on[r].append(length)
            busy[r] += (length * length) / size
            ids_on[r].append(sid)

    sid, length = items[0]
    size = ref_needed_gpus(length, per_rank, min_cp)
    assert size <= total, "first sample needs more ranks than exist"
    members_of[0] = list(range(size))
    size_of[0] = size
    fill_of[0] = length / size
    add(members_of[0], sid, length, 0, size)
    next_gid = 1

    left = []
    for sid, length in items[1:]:
        best = None
        size = ref_needed_gpus(length, per_rank, min_cp)
        while size <= total:
            each = (length * length) / size
            for gid in list(size_of):
                if size_of[gid] != size:
                    continue
                if fill_of.get(gid, 0) + length / size > per_rank:
                    continue
                ms = set(members_of[gid])
                peak = max(t + each if r in ms else t for r, t in enumerate(busy))
                if peak <= cap and (best is None or peak < best[0]):
                    best = (peak, size, gid, None)
            free = [r for r in range(total) if owner[r] is None]
            if len(free) >= size:
                pick = sorted(free, key=lambda r: busy[r])[:size]
                ps = set(pick)
                peak = max(t + each if r in ps else t for r, t in enumerate(busy))
                if peak <= cap and (best is None or peak < best[0]):
                    best = (peak, size, None, pick)
            size *= 2
        if best is None:
            left.append((sid, length))
            continue
        _, size, gid, pick = best
        if gid is not None:
            fill_of[gid] += length / size
            add(members_of[gid], sid, length, gid, size)
        else:
            gid = next_gid
            next_gid += 1
            members_of[gid] = pick
            size_of[gid] = size
            fill_of[gid] = length / size
            add(pick, sid, length, gid, size)

    def grow_once():
        nonlocal lens_on, busy, ids_on
        empties = [r for r in range(total) if not lens_on[r]]
        if not empties:
            return False
        smallest = min(set(size_of.values()))
        bigger = min(smallest * 2, total)
        for gid in list(size_of):
            if size_of[gid] != smallest:
                continue
            more = bigger - smallest
            lo, hi = members_of[gid][0], members_of[gid][-1]
            e0 = empties[0]
            if hi + 1 > e0 or hi + more >= total:
                continue
            shifted_lens = lens_on[hi + 1:e0]
            shifted_busy = busy[hi + 1:e0]
            shifted_ids = ids_on[hi + 1:e0]
            n_lens = [[] for _ in range(total)]
            n_busy = [0.0] * total
            n_ids = [[] for _ in range(total)]
            for r in range(lo):
                n_lens[r], n_busy[r], n_ids[r] = lens_on[r], busy[r], ids_on[r]
            for r in range(lo, hi + more + 1):
                n_lens[r] = list(lens_on[hi])
                n_busy[r] = sum((x * x) / bigger for x in lens_on[hi])
                n_ids[r] = list(ids_on[hi])
            for k in range(len(shifted_lens)):
                dest = hi + more + 1 + k
                n_lens[dest] = shifted_lens[k]  # IndexError past the last rank, as Megatron
                n_busy[dest] = shifted_busy[k]
                n_ids[dest] = shifted_ids[k]
            size_of[gid] = bigger
            members_of[gid] = list(range(lo, hi + more + 1))
            for other in list(size_of):
                if other != gid and min(members_of[other]) > hi:
                    members_of[other] = [r + more for r in members_of[other]]
            lens_on, busy, ids_on = n_lens, n_busy, n_ids
            return True
        return False

    while any(not x for x in lens_on):
        if not grow_once():
            taken, rest, acc = [], [], 0.0
            for sid, length in items:
                if acc + length / total <= per_rank:
                    taken.append(sid)
                    acc += length / total
                else:
                    rest.append((sid, length))
            assert taken, "nothing fits the full group"
            ids_on = [list(taken) for _ in range(total)]
            left = rest
            break
    return ids_on, left


def ref_align(groups, multiple):
    """Megatron's align_sample_id_groups, with a guard where it would loop."""
    short = (-len(groups)) % multiple
    idx = len(groups) - 1

    def runs_from_front(g):
        bounds = [0]
        last = 0
        while bounds[-1] != len(g):
            s = bounds[-1]
            head = g[s][0]
            n = 0
            for r in range(s, len(g)):
                if head in g[r]:
                    n += 1
                else:
                    break
            assert last == 0 or n <= last, "CP sizes grow along the ranks"
            bounds.append(s + n)
            last = n
        return bounds

    def refill(g):
        rounds = 0
        while len(g[-1]) == 0:
            rounds += 1
            if rounds > 4 * len(g) + 8:
                raise ReferenceLoops()
            nempty = sum(1 for x in g if len(x) == 0)
            i = len(g) - 1 - nempty
            last = 0
            while i >= 0:
                head = g[i][0]
                n = 0
                while head in g[i] and i >= 0:
                    n += 1
                    i -= 1
                if n > last and last != 0:
                    s = i + 1 + n
                    cut = -nempty + last if -nempty + last < 0 else None
                    g[s + 2 * last:cut] = g[s + last:-nempty]
                    g[s + last:s + 2 * last] = g[s:s + last]
                    break
                if n <= nempty and i == -1:
                    cut = -nempty + n if -nempty + n < 0 else None
                    g[2 * n:cut] = g[n:-nempty]
                    g[n:2 * n] = g[0:n]
                    break
                last = n
        return g

    def halve(g):
        bounds = runs_from_front(g)
        if len(bounds) == 2:
            return None
        k = 0
        while bounds[k] < len(g) // 2:
            k += 1
        front = g[:bounds[k]] + [[] for _ in range(len(g) - bounds[k])]
        back = g[bounds[k]:] + [[] for _ in range(bounds[k])]
        front = refill(front)
        back = refill(back)
        return back, front

    misses = 0
    while short > 0:
        if idx < 0:
            assert misses < len(groups), "no micro-batch can be split"
            idx = len(groups) - 1
        halves = halve(groups[idx])
        if halves is None:
            misses += 1
        else:
            groups[idx] = halves[0]
            groups.append(halves[1])
            short -= 1
            misses = 0
        idx -= 1
    return groups


def reference(pairs, total, per_rank, min_cp=1, vpp=None):
    pairs = sorted(pairs, key=lambda pair: pair[1], reverse=True)
    out = []
    while pairs:
        ids, pairs = ref_one_group(pairs, total, per_rank, min_cp)
        out.append(ids)
    if vpp is not None and vpp > 1:
        out = ref_align(out, vpp)
    return out


def outcome(fn):
    """('ok', value), or the kind of failure: 'assert', 'index' or 'loop'."""
    try:
        return ("ok", fn())
    except ReferenceLoops:
        return ("loop", None)
    except AssertionError:
        return ("assert", None)
    except IndexError:
        return ("index", None)


def dcp(pairs, dp, cp, per_rank, min_cp=1, vpp=None):
    return megatron.get_groups_and_subsamples(
        pairs, max_seqlen_per_dp_cp_rank=per_rank, dp_size=dp, cp_size=cp,
        strategy="megatron_dcp", microbatch_group_size_per_vp_stage=vpp, min_cp_size=min_cp)


def same(pairs, dp, cp, per_rank, min_cp=1, vpp=None):
    """Asserts fulcrum and the reference agree; returns the reference's outcome."""
    want = outcome(lambda: reference(list(pairs), dp * cp, per_rank, min_cp, vpp))
    got = outcome(lambda: dcp(list(pairs), dp, cp, per_rank, min_cp, vpp))
    if want[0] == "loop":
        # Megatron never returns; fulcrum says so.
        assert got[0] == "assert", (pairs, dp, cp, per_rank, min_cp, vpp, got)
    else:
        assert got == want, (pairs, dp, cp, per_rank, min_cp, vpp)
    return want


# -- Megatron's own unit tests ---------------------------------------------


def test_megatron_case_larger_cp_group_for_short_sequences():
    # test_next_hdp_group_packing_aware_can_use_larger_cp_group_for_short_sequences
    pairs = [(0, 6144), (1, 2048)]
    assert dcp(pairs, 1, 2, 4096) == [[[0, 1], [0, 1]]]
    assert reference(pairs, 2, 4096) == [[[0, 1], [0, 1]]]


def test_megatron_case_fills_non_power_of_two_world():
    # test_next_hdp_group_packing_aware_fills_non_power_of_two_dpxcp_group
    pairs = [(0, 50), (1, 50)]
    want = [[[0, 1] for _ in range(14)]]
    assert dcp(pairs, 7, 2, 100) == want
    assert reference(pairs, 14, 100) == want


def test_megatron_case_scheduler_class():
    # test_default_dynamic_cp_scheduler_uses_packing_aware_grouping_by_default
    scheduler = megatron.DynamicCPScheduler(max_seqlen_per_dp_cp_rank=4096, cp_size=2, dp_size=1,
                                            microbatch_group_size_per_vp_stage=None,
                                            strategy="megatron_dcp")
    assert scheduler.get_groups_and_subsamples([(0, 6144), (1, 2048)]) == [[[0, 1], [0, 1]]]


def wrap_dataloader_batch():
    """The global batch of Megatron's test_wrap_dataloader: 64 lengths from
    random.Random(42) in [2048, 8192], padded to multiples of 16."""
    rng = random.Random(42)
    nums = [rng.randint(2048, 8192) for _ in range(64)]
    return [(i, (n + 15) // 16 * 16) for i, n in enumerate(nums)]


@pytest.mark.parametrize("dp, cp, vpp", [(1, 8, None), (1, 4, None), (1, 2, 4)])
def test_megatron_wrap_dataloader_batches(dp, cp, vpp):
    # test_wrap_dataloader's default_dynamic_cp rows: (tp, pp, cp, vpp) = (1, 1, 8, -),
    # (2, 1, 4, -), (1, 2, 4, -), (1, 4, 2, 4) on 8 GPUs, max_seqlen_per_dp_cp_rank 8192;
    # its check is that every token arrives once.
    pairs = wrap_dataloader_batch()
    kind, groups = same(pairs, dp, cp, 8192, vpp=vpp)
    assert kind == "ok"
    world = dp * cp
    for micro in groups:
        assert len(micro) >= world and all(micro[r] for r in range(world))
    placed = sorted({i for micro in groups for r in range(world) for i in micro[r]})
    assert placed == list(range(64))
    if vpp:
        assert len(groups) % vpp == 0


# -- cases worked by hand from Megatron's code ----------------------------


def test_pinned_group_growth_shifts_later_groups():
    # 4097 -> 2 ranks [0, 1]; 4096 -> a new pair [2, 3] (its lone-rank work
    # 4096^2 is over the pair's peak); 3000 -> a new pair [4, 5]; ranks 6, 7
    # are empty, so the first pair grows to [0, 3] and the others move up.
    pairs = [(0, 4097), (1, 4096), (2, 3000)]
    want = [[[0], [0], [0], [0], [1], [1], [2], [2]]]
    assert dcp(pairs, 4, 2, 4096) == want
    assert reference(pairs, 8, 4096) == want


def test_pinned_index_error_at_ten_ranks():
    # 201 -> 4 ranks [0, 3]; 200 -> 4 new ranks [4, 7] (peak 10100.25 < 20000
    # on a pair); growing [0, 3] to 8 ranks moves [4, 7] to [8, 11], past rank 9.
    pairs = [(0, 201), (1, 200)]
    assert outcome(lambda: reference(pairs, 10, 100))[0] == "index"
    with pytest.raises(IndexError) as caught:
        dcp(pairs, 5, 2, 100)
    assert isinstance(caught.value, FulcrumError)


def test_pinned_group_megatron_cannot_run():
    # At 6 ranks Megatron builds groups of 1, 2 and 6 ranks, but its scheduler
    # grows the pair [0, 1] to 4 ranks.
    pairs = [(0, 150), (1, 150)]
    want = [[[0], [0], [0], [0], [1], [1]]]
    assert dcp(pairs, 3, 2, 100) == want
    assert reference(pairs, 6, 100) == want
    assert not megatron.group_is_megatron_group([0, 1, 2, 3], 6)


def test_pinned_virtual_pipeline_alignment():
    # One micro-batch of four single-rank groups, aligned to 2: split at rank
    # 2, each half refilled by doubling; the back half stays in place.
    pairs = [(0, 100), (1, 100), (2, 100), (3, 100)]
    want = [[[2], [2], [3], [3]], [[0], [0], [1], [1]]]
    assert dcp(pairs, 2, 2, 100, vpp=2) == want
    assert reference(pairs, 4, 100, vpp=2) == want


def test_raises_where_megatron_asserts():
    with pytest.raises(AssertionError):
        dcp([(0, 1000)], 2, 2, 100)  # needs 16 ranks of 4
    assert outcome(lambda: reference([(0, 1000)], 4, 100))[0] == "assert"
    with pytest.raises(FulcrumError):
        dcp([(0, 1000)], 2, 2, 100)


def test_empty_batch_and_bad_arguments():
    assert dcp([], 2, 2, 100) == []
    for bad in ([(0, 0)], [(0, -5)], [(0, 1.5)], [(0, 10), (0, 20)], [(0,)], 7):
        with pytest.raises(FulcrumError):
            dcp(bad, 2, 2, 100)
    with pytest.raises(FulcrumError):
        dcp([(0, 10)], 0, 2, 100)
    with pytest.raises(FulcrumError):
        megatron.get_groups_and_subsamples([(0, 10)], max_seqlen_per_dp_cp_rank=100, dp_size=1,
                                           cp_size=2, strategy="nope")


# -- random batches against the reference ---------------------------------


def random_case(rng):
    dp = rng.choice([1, 2, 3, 4, 5, 6, 7, 8])
    cp = rng.choice([1, 2, 3, 4, 8])
    per_rank = rng.choice([64, 100, 128, 1000, 4096])
    shape = rng.random()
    count = rng.randint(1, 40)
    top = per_rank * dp * cp
    if shape < 0.3:
        lengths = [rng.randint(1, per_rank) for _ in range(count)]
    elif shape < 0.6:
        lengths = [min(top, max(1, int(rng.lognormvariate(math.log(per_rank / 2), 1.2))))
                   for _ in range(count)]
    else:
        lengths = [rng.randint(1, max(1, top // rng.choice([1, 2, 4, 8]))) for _ in range(count)]
    if rng.random() < 0.05:
        lengths.append(top * 2)  # one sample too long for the world
    ids = list(range(len(lengths)))
    rng.shuffle(ids)
    min_cp = rng.choice([1, 1, 1, 2, 3, 4])
    vpp = rng.choice([None, None, 1, 2, 3, 4])
    return list(zip(ids, lengths)), dp, cp, per_rank, min_cp, vpp


def test_random_batches_match_the_reference():
    rng = random.Random(20260826)
    kinds = {}
    for _ in range(1500):
        pairs, dp, cp, per_rank, min_cp, vpp = random_case(rng)
        kind, _ = same(pairs, dp, cp, per_rank, min_cp, vpp)
        kinds[kind] = kinds.get(kind, 0) + 1
    # The random cases reach every outcome, so the comparison covers each.
    assert kinds.get("ok", 0) > 500 and kinds.get("assert", 0) > 0 and kinds.get("index", 0) > 0


def test_random_batches_at_non_power_of_two_worlds():
    rng = random.Random(7)
    seen_ok = 0
    for world in (6, 10, 12, 14, 24, 40, 48):
        for _ in range(60):
            per_rank = rng.choice([100, 4096])
            lengths = [rng.randint(1, per_rank * rng.choice([1, 2, 4]))
                       for _ in range(rng.randint(1, 3 * world))]
            pairs = list(enumerate(lengths))
            kind, _ = same(pairs, world // 2, 2, per_rank)
            seen_ok += kind == "ok"
    assert seen_ok > 100


def test_pinned_alignment_megatron_never_finishes():
    # Three 2-rank groups at W = 6 aligned to 2: the front half [A, A, B, B]
    # doubles A into 4 ranks, the back half [C, C] doubles to 4 ranks and then
    # has one run of 4 with 2 empty ranks, which Megatron's refill neither
    # grows nor leaves: its loop never ends. fulcrum raises instead.
    pairs = [(0, 150), (1, 150), (2, 150)]
    assert dcp(pairs, 3, 2, 100) == [[[0], [0], [1], [1], [2], [2]]]
    assert outcome(lambda: reference(pairs, 6, 100, vpp=2))[0] == "loop"
    with pytest.raises(AssertionError, match="does not terminate"):
        dcp(pairs, 3, 2, 100, vpp=2)


# -- the C++ scheduler (the plugin's megatron_dcp) against this one ----------
#
# The plugin schedules raw document lengths and pads each to a multiple of
# 2W itself, as Megatron's dataset pads with dynamic CP (2 x dp x cp);
# Megatron's scheduler, and fulcrum.megatron with it, takes the padded
# lengths. Each of the plugin's waves is a micro-batch and each of its slots
# a CP group, so its answer reads as sample_id_groups[wave][rank].


def padded(length, world):
    return -(-length // (2 * world)) * (2 * world)


def megatron_shapes(world, min_cp, vpp):
    """The group_shapes that carry Megatron's min_cp_size (the least size
    allowed) and microbatch_group_size_per_vp_stage (the wave multiple) to
    the plugin, allowing every group Megatron's scheduler forms."""
    from fulcrum.schedule import GroupShapes
    sizes = []
    size = min_cp
    while size <= world:
        sizes.append(size)
        size *= 2
    return GroupShapes(sizes=tuple(sizes), world=True, every_wave=True,
                       wave_multiple=vpp or 1)


def plugin_groups(balancer, lengths, world, per_rank, min_cp=1, vpp=None):
    """('ok', sample_id_groups) from the plugin; ('fell back', reason) where it
    served fixed's schedule instead; ('refused', message) where fixed could
    not serve either."""
    shapes = megatron_shapes(world, min_cp, vpp) if min_cp > 1 or (vpp or 1) > 1 else None
    try:
        s = balancer.schedule("megatron_dcp", world=world, max_tokens_per_rank=per_rank,
                              doc_lengths=lengths, profile="h100_7b", block_size=64,
                              group_shapes=shapes)
    except FulcrumError as e:
        # Falling back to fixed, which cannot keep the request's shapes.
        assert e.code == "unsupported", e
        return ("refused", str(e))
    if s.used != "megatron_dcp":
        assert s.used == "fixed", s.used
        return ("fell back", s.fallback_reason)
    assert s.fallback_reason is None
    groups = [[[] for _ in range(world)] for _ in range(s.num_waves)]
    for slot in s.slots:
        group = slot.group.tolist()
        assert group == list(range(group[0], group[0] + len(group))), group
        for rank in group:
            assert groups[slot.wave][rank] == [], (slot.wave, rank)
            groups[slot.wave][rank] = [int(d) for d in slot.docs]
    return ("ok", groups)


def python_groups(lengths, world, per_rank, min_cp=1, vpp=None):
    """('ok', sample_id_groups) from fulcrum.megatron on the padded lengths,
    or the kind of Megatron's failure ('assert' or 'index'; 'lost' where the
    alignment leaves samples on list entries past the last rank)."""
    pairs = [(i, padded(n, world)) for i, n in enumerate(lengths)]
    try:
        groups = megatron.megatron_dcp(pairs, world, per_rank, min_cp, vpp)
        if any(len(micro) > world for micro in groups):
            return ("lost", None)
        return ("ok", groups)
    except AssertionError:
        return ("assert", None)
    except IndexError:
        return ("index", None)


def check_same(balancer, lengths, world, per_rank, min_cp=1, vpp=None):
    got = plugin_groups(balancer, lengths, world, per_rank, min_cp, vpp)
    want = python_groups(lengths, world, per_rank, min_cp, vpp)
    case = (lengths, world, per_rank, min_cp, vpp)
    if want[0] == "ok":
        assert got == want, case
    elif want[0] == "assert":
        assert got[0] in ("fell back", "refused") and ("Megatron asserts" in got[1]
                                                       or "never returns" in got[1]), (case, got)
    elif want[0] == "lost":
        assert got[0] in ("fell back", "refused") and "where no rank runs them" in got[1], \
            (case, got)
    else:
        assert got[0] in ("fell back", "refused") and "IndexError" in got[1], (case, got)
    return want[0]


PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61)


def test_plugin_matches_on_random_batches(balancer):
    rng = random.Random(2508)
    kinds = {}
    worlds = list(range(2, 65))
    for case in range(900):
        world = rng.choice(PRIMES) if case % 3 == 0 else rng.choice(worlds)
        per_rank = rng.choice([16, 100, 128, 1000, 4096])
        top = world * per_rank
        shape = rng.random()
        count = rng.randint(1, 3 * world)
        if shape < 0.3:
            lengths = [rng.randint(1, per_rank) for _ in range(count)]
        elif shape < 0.7:
            lengths = [min(top, max(1, int(rng.lognormvariate(math.log(per_rank / 2), 1.3))))
                       for _ in range(count)]
        else:
            lengths = [rng.randint(1, max(1, top // rng.choice([1, 2, 4, 8])))
                       for _ in range(count)]
        kind = check_same(balancer, lengths, world, per_rank)
        kinds[kind] = kinds.get(kind, 0) + 1
    # Every outcome is reached, so each is compared.
    assert kinds.get("ok", 0) > 300 and kinds.get("assert", 0) > 50 and kinds.get("index", 0) > 50, \
        kinds


def test_plugin_matches_on_megatron_cases(balancer):
    # Megatron's own unit-test inputs (already multiples of 2W, so padding
    # leaves them), and the same with raw lengths the padding rounds up.
    assert check_same(balancer, [6144, 2048], 2, 4096) == "ok"
    assert plugin_groups(balancer, [6144, 2048], 2, 4096) == ("ok", [[[0, 1], [0, 1]]])
    for lengths in ([56, 56], [50, 50]):
        assert plugin_groups(balancer, lengths, 14, 100) == ("ok", [[[0, 1]] * 14])
        assert check_same(balancer, lengths, 14, 100) == "ok"


def test_plugin_group_sizes_at_twelve_ranks(balancer):
    # Any power of two up to W: 8 + 2 + 1 + 1 at W = 12.
    lengths = [792, 192, 96, 96]
    kind, groups = plugin_groups(balancer, lengths, 12, 100)
    assert kind == "ok"
    assert groups == [[[0]] * 8 + [[1]] * 2 + [[2], [3]]]
    assert check_same(balancer, lengths, 12, 100) == "ok"


def test_plugin_matches_with_alignment_and_min_cp_size(balancer):
    # Megatron's virtual-pipeline alignment and min_cp_size, carried by the
    # request's group_shapes (the wave multiple and the least size).
    rng = random.Random(826)
    kinds = {}
    aligned = 0
    for case in range(600):
        world = (rng.choice(PRIMES) if case % 4 == 0 else rng.randint(2, 64) if case % 4 == 1
                 else rng.choice([2, 4, 8, 16, 32, 64]))
        per_rank = rng.choice([16, 100, 128, 1000])
        vpp = rng.choice([None, 2, 3, 4])
        min_cp = rng.choice([c for c in (1, 1, 2, 4) if c <= world])
        count = rng.randint(1, 2 * world)
        lengths = [min(world * per_rank, max(1, int(rng.lognormvariate(math.log(per_rank), 1.3))))
                   for _ in range(count)]
        kind = check_same(balancer, lengths, world, per_rank, min_cp, vpp)
        kinds[kind] = kinds.get(kind, 0) + 1
        if kind == "ok" and vpp and vpp > 1:
            plain = python_groups(lengths, world, per_rank, min_cp)
            aligned += plain[0] == "ok" and len(plain[1]) % vpp != 0
    # Every outcome is reached, and the alignment split micro-batches often.
    assert kinds.get("ok", 0) > 250 and kinds.get("assert", 0) > 30 and aligned > 50, \
        (kinds, aligned)
