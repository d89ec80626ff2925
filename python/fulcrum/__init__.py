"""fulcrum from Python: the balancer plugin over its C ABI, with NumPy results.

    import fulcrum
    balancer = fulcrum.load()                      # libfulcrum_balancer.so, searched
    plan = balancer.plan_cp("auto", cp=8, doc_lengths=[4096, 1000, 27672])
    plan.positions, plan.restore, plan.imbalance   # (8, shard_len), (N,), pairs/tiles
    part = balancer.partition_dp([512, 8000, 300, 4096], dp=2, cost="attention")
    sched = balancer.schedule("hybrid", world=8, max_tokens_per_rank=8192,
                              doc_lengths=[30000, 900, 5000], profile="profile.yaml")

PyTorch adapters live in fulcrum.torch (imported only on demand; fulcrum.torch_cp
is its former name); fulcrum.block_mask needs NumPy only.
"""

from .balancer import (Balancer, CpPlan, DpPartition, Imbalance, RankWork, load, parse_cost)
from .errors import FulcrumError
from .loader import default_search_dirs
from .schedule import CostProfile, Schedule, ScheduleSlot
from .work import Mask

__all__ = [
    "Balancer", "CostProfile", "CpPlan", "DpPartition", "FulcrumError", "Imbalance", "Mask",
    "RankWork", "Schedule", "ScheduleSlot", "default_search_dirs", "load", "parse_cost",
]
__version__ = "0.1.0"
