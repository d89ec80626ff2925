"""strategy="hybrid" of fulcrum.megatron: fulcrum's placement, through the
plugin's schedule hook, restricted to what Megatron-core's runtime runs.

The request carries group shapes (ABI 1.2, docs/INTEGRATION.md): the sizes
Megatron builds communicators for (``megatron.megatron_group_sizes``), each
an aligned block of ranks, and every rank in every wave (Megatron packs one
row per rank per micro-batch and indexes its first sample), the wave count a
multiple of ``microbatch_group_size_per_vp_stage`` when the virtual pipeline
needs it. Wave w of the schedule is micro-batch w; a slot's documents, in
row order, are the ids every member of the slot holds in that micro-batch.
"""

from . import schedule as schedule_model
from .errors import FulcrumError

_balancer = None


def resolve_profile(profile):
    """A CostProfile from None (h100_7b), a bundled name, a mapping, a
    CostProfile or the path of a profile YAML file."""
    if profile is None:
        profile = "h100_7b"
    if isinstance(profile, schedule_model.CostProfile):
        return profile
    if isinstance(profile, dict):
        return schedule_model.CostProfile.from_mapping(profile)
    return schedule_model.CostProfile.resolve(profile)


def default_balancer():
    """fulcrum.load(), once per process."""
    global _balancer
    if _balancer is None:
        from .balancer import load
        _balancer = load()
    return _balancer


def megatron_shapes(world, min_cp_size=1, multiple=None):
    """The GroupShapes of Megatron-core's dynamic-CP runtime at DP x CP = world."""
    from .megatron import megatron_group_sizes
    sizes = megatron_group_sizes(world, min_cp_size)
    powers = tuple(g for g in sizes if g & (g - 1) == 0)
    return schedule_model.GroupShapes(
        sizes=powers, world=True, aligned=True, every_wave=True,
        wave_multiple=multiple if multiple is not None and multiple > 1 else 1)


def plan(rows, *, world, budget, min_cp_size=1, multiple=None, profile=None, balancer=None):
    """The plugin's shaped hybrid schedule of ``rows`` ((id, length) pairs;
    document d of the request is rows[d])."""
    if world % 2:
        raise FulcrumError("unsupported", f"DP x CP = {world} is odd; Megatron-core refuses "
                           "dynamic CP on an odd number of ranks (its groups pair ranks up)")
    for sample, length in rows:
        if length > world * budget:
            raise FulcrumError("invalid_argument", f"sample {sample!r} has {length} tokens, more "
                               f"than the {world} x {budget} the DP x CP ranks hold; Megatron "
                               "cannot split a sample: raise max_seqlen_per_dp_cp_rank")
    balancer = balancer if balancer is not None else default_balancer()
    return balancer.schedule(
        "hybrid", world=world, max_tokens_per_rank=budget,
        doc_lengths=[length for _, length in rows], profile=resolve_profile(profile),
        group_shapes=megatron_shapes(world, min_cp_size, multiple))


def to_sample_id_groups(schedule, rows):
    """Wave w -> micro-batch w; each member of a slot holds the slot's ids."""
    groups = [[None] * schedule.world for _ in range(schedule.num_waves)]
    for slot in schedule.slots:
        ids = [rows[int(d)][0] for d in slot.docs]
        for rank in slot.group.tolist():
            groups[slot.wave][rank] = list(ids)
    return groups


def schedule(rows, *, world, budget, min_cp_size=1, multiple=None, profile=None, balancer=None):
    """``sample_id_groups`` for Megatron from the shaped hybrid schedule."""
    if not rows:
        return []
    placed = plan(rows, world=world, budget=budget, min_cp_size=min_cp_size, multiple=multiple,
                  profile=profile, balancer=balancer)
    groups = to_sample_id_groups(placed, rows)
    problem = megatron_runtime_problem(groups, rows, world, budget, min_cp_size, multiple)
    if problem:
        raise FulcrumError("internal", f"the hybrid schedule breaks a Megatron-core rule: "
                           f"{problem}; please report it")
    return groups


def megatron_runtime_problem(groups, rows, world, budget, min_cp_size=1, multiple=None):
    """What Megatron-core's runtime would reject or mis-run in
    ``sample_id_groups``, or None: every rank holds a sample in every
    micro-batch; ranks holding a micro-batch's sample hold the same list and
    form a group Megatron looks up by its size; each id appears in exactly
    one group; a group's samples fit its members (length sum / size <= T);
    the micro-batch count is a multiple of the virtual-pipeline group."""
    from .megatron import group_is_megatron_group
    lengths = dict(rows)
    seen = {}
    for m, micro in enumerate(groups):
        if len(micro) != world:
            return f"micro-batch {m} has {len(micro)} rank lists, not {world}"
        r = 0
        while r < world:
            ids = micro[r]
            if not ids:
                return f"rank {r} holds nothing in micro-batch {m}"
            members = [q for q in range(world) if micro[q] and ids[0] in micro[q]]
            if any(micro[q] != ids for q in members):
                return (f"ranks {members} share sample {ids[0]} in micro-batch {m} with "
                        "different lists")
            if not group_is_megatron_group(members, world, min_cp_size):
                return f"ranks {members} in micro-batch {m} are no Megatron CP group"
            if sum(lengths[i] for i in ids) > budget * len(members):
                return f"ranks {members} in micro-batch {m} hold more than {budget} tokens each"
            for i in ids:
                if i in seen:
                    return f"sample {i} is in micro-batches {seen[i]} and {m}"
                seen[i] = m
            r = members[-1] + 1
            if members[0] != r - len(members):
                return f"ranks {members} in micro-batch {m} are not consecutive"
    if len(seen) != len(rows):
        return f"{len(rows) - len(seen)} samples are never placed"
    if multiple is not None and multiple > 1 and len(groups) % multiple:
        return f"{len(groups)} micro-batches, not a multiple of {multiple}"
    return None
