"""fulcrum.megatron with strategy="hybrid" (the plugin's schedule hook under
Megatron-core's group shapes) returns only what Megatron-core's runtime can
run, on random batches, checked by a recount written here from Megatron's
code (parallel_state.create_dynamic_dp_cp_groups and
get_dynamic_data_context_parallel_groups, data_schedule's checks, and
build_packed_microbatches' local CP size); and the docs/INTEGRATION.md
Megatron-core code runs as written."""

import math
import pathlib
import random
import re
import sys
import types

import pytest

from fulcrum import megatron, megatron_hybrid
from fulcrum import schedule as schedule_model
from fulcrum.errors import FulcrumError

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "INTEGRATION.md"


def megatron_communicators(world, min_cp):
    """size -> the rank list of the group each rank finds when it looks its
    group up by that size, as Megatron builds them (blocks of every power of
    two below 2^floor(log2 W) from min_cp up, and the whole DP x CP group)."""
    found = {}
    for i in range(int(math.log2(world))):
        size = 2**i
        if size < min_cp:
            continue
        for start in range(0, world, size):
            block = list(range(start, min(start + size, world)))
            for rank in block:
                found[(size, rank)] = block
    for rank in range(world):
        found[(world, rank)] = list(range(world))
    return found


def check_runs_in_megatron(groups, pairs, world, per_rank, min_cp, vpp):
    lengths = dict(pairs)
    comms = megatron_communicators(world, min_cp)
    owner = {}
    for m, micro in enumerate(groups):
        assert len(micro) == world
        for rank in range(world):
            ids = micro[rank]
            assert ids, f"rank {rank} empty in micro-batch {m}"  # Megatron indexes ids[0]
            # build_packed_microbatches: local CP size = ranks holding my first id.
            local = [r for r in range(world) if ids[0] in micro[r]]
            group = comms.get((len(local), rank))
            assert group == local, (m, rank, local, group)
            assert all(micro[r] == ids for r in local)  # one packed row per group
            assert sum(lengths[i] for i in ids) <= per_rank * len(local)
            for i in ids:
                assert owner.setdefault(i, (m, local[0])) == (m, local[0]), i
    assert sorted(owner) == sorted(lengths)  # data_schedule's every-sample check, exactly once
    if vpp is not None and vpp > 1:
        assert len(groups) % vpp == 0


def hybrid(pairs, world, per_rank, balancer, min_cp=1, vpp=None):
    return megatron.get_groups_and_subsamples(
        pairs, max_seqlen_per_dp_cp_rank=per_rank, dp_size=world // 2, cp_size=2,
        strategy="hybrid", microbatch_group_size_per_vp_stage=vpp, min_cp_size=min_cp,
        balancer=balancer)


def test_random_batches_run_in_megatron(balancer):
    rng = random.Random(99)
    served = refused = 0
    for _ in range(150):
        world = rng.choice([2, 4, 6, 8, 10, 12, 16, 24, 32, 64])
        per_rank = rng.choice([128, 1000, 4096])
        count = rng.randint(1, 4 * world)
        lengths = []
        for _ in range(count):
            top = per_rank * rng.choice([1, 1, 1, 2, 4, world])
            lengths.append(rng.randint(1, min(top, per_rank * world)))
        ids = rng.sample(range(10 * count), count)
        pairs = list(zip(ids, lengths))
        min_cp = rng.choice([1, 1, 2])
        vpp = rng.choice([None, None, 2, 4])
        try:
            groups = hybrid(pairs, world, per_rank, balancer, min_cp, vpp)
        except FulcrumError as error:
            # Only a batch too small for every rank in every wave is refused.
            assert error.code == "unsupported" and "wave" in str(error), str(error)
            refused += 1
            continue
        served += 1
        check_runs_in_megatron(groups, pairs, world, per_rank, min_cp, vpp)
    assert served >= 120, (served, refused)


def test_megatron_test_inputs(balancer):
    # The inputs of Megatron's scheduler tests, placed by hybrid.
    groups = hybrid([(0, 6144), (1, 2048)], 2, 4096, balancer)
    check_runs_in_megatron(groups, [(0, 6144), (1, 2048)], 2, 4096, 1, None)
    groups = hybrid([(0, 50), (1, 50)], 14, 100, balancer)
    check_runs_in_megatron(groups, [(0, 50), (1, 50)], 14, 100, 1, None)


def test_refusals(balancer):
    with pytest.raises(FulcrumError, match="odd"):
        megatron.get_groups_and_subsamples([(0, 10)], max_seqlen_per_dp_cp_rank=100, dp_size=3,
                                           cp_size=1, balancer=balancer)
    with pytest.raises(FulcrumError, match="cannot split a sample"):
        hybrid([(0, 1000)], 4, 100, balancer)
    assert hybrid([], 4, 100, balancer) == []
    with pytest.raises(FulcrumError, match="waves") as caught:
        hybrid([(7, 50)], 4, 100, balancer, vpp=4)  # one sample, four micro-batches
    assert caught.value.code == "unsupported"


def test_the_plugin_refuses_a_shape_breaking_schedule(balancer):
    # Asked for fixed CP groups of 3 under Megatron's shapes at 6 ranks (which
    # have groups of 1, 2 and 6), the plugin declines.
    shapes = megatron_hybrid.megatron_shapes(6)
    with pytest.raises(FulcrumError) as caught:
        balancer.schedule("fixed", world=6, max_tokens_per_rank=100, cp=3,
                          doc_lengths=[250, 250], profile=megatron_hybrid.resolve_profile(None),
                          group_shapes=shapes)
    assert caught.value.code == "unsupported" and "group_shapes" in str(caught.value)
    with pytest.raises(FulcrumError):
        schedule_model.GroupShapes(sizes=(3,))
    with pytest.raises(FulcrumError):
        schedule_model.GroupShapes(wave_multiple=2)


def doc_blocks():
    text = DOC.read_text()
    section = text.split("## Megatron-core", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_doc_code_runs(balancer, monkeypatch):
    # A stand-in for Megatron-core's module: its scheduler map and base class
    # with Megatron's constructor (megatron/core/datasets/data_schedule.py).
    class DefaultDynamicCPScheduler:
        def __init__(self, max_seqlen_per_dp_cp_rank, cp_size, dp_size,
                     microbatch_group_size_per_vp_stage, max_num_seqs=None, min_cp_size=1):
            self.max_seqlen_per_dp_cp_rank = max_seqlen_per_dp_cp_rank
            self.cp_size, self.dp_size = cp_size, dp_size
            self.microbatch_group_size_per_vp_stage = microbatch_group_size_per_vp_stage
            self.min_cp_size = min_cp_size

        def run(self):
            return "megatron's run"

    data_schedule = types.ModuleType("megatron.core.datasets.data_schedule")
    data_schedule.DefaultDynamicCPScheduler = DefaultDynamicCPScheduler
    data_schedule.scheduler_map = {"default_dynamic_cp": DefaultDynamicCPScheduler}
    names = ["megatron", "megatron.core", "megatron.core.datasets"]
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "megatron.core.datasets.data_schedule", data_schedule)
    sys.modules["megatron.core.datasets"].data_schedule = data_schedule
    monkeypatch.setattr(megatron_hybrid, "_balancer", balancer)

    blocks = doc_blocks()
    assert len(blocks) >= 2
    scope = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), scope)
    cls = data_schedule.scheduler_map["default_dynamic_cp"]
    assert issubclass(cls, DefaultDynamicCPScheduler)
    # Megatron's wrap_data_iterator constructs it so:
    scheduler = cls(4096, 2, 4, None, max_num_seqs=None, min_cp_size=1)
    assert scheduler.run() == "megatron's run"
    pairs = [(0, 6144), (1, 2048), (2, 900), (3, 12000), (4, 300)]
    groups = scheduler.get_groups_and_subsamples(pairs)
    check_runs_in_megatron(groups, pairs, 8, 4096, 1, None)
    check_runs_in_megatron(scope["sample_id_groups"], scope["sample_id_seqlens"], 8, 4096, 1,
                           None)
