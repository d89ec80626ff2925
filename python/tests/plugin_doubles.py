"""A loaded plugin's function table with some of its functions wrapped, for
tests (and python/benchmarks/overhead.py) that make a real plugin answer the
way a faulty or a minimal one would. Install one with
``balancer._table = ...``; every field not replaced is the table's own."""


class TableWith:
    """``table`` with the functions given by name replaced."""

    def __init__(self, table, **replaced):
        self._table = table
        self.__dict__.update(replaced)

    def __getattr__(self, name):
        return getattr(self._table, name)


def altered_plans(table, alter):
    """``table`` whose plan_cp calls the plugin's, then ``alter(plan)`` on
    the answer struct the package is about to read."""
    def plan_cp(instance, request, plan):
        status = table.plan_cp(instance, request, plan)
        alter(plan._obj)
        return status

    return TableWith(table, plan_cp=plan_cp)


def without_figures(plan):
    """An alteration: the per-rank figures withheld (rank_pairs and
    rank_tiles NULL, as the ABI allows), so the package computes them."""
    plan.rank_pairs = None
    plan.rank_tiles = None
