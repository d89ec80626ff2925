"""The package against the fulcrum CLI on random workloads: the same plans and
the same figures, for every strategy, and the same DP partitions."""

import json

import numpy as np
import pytest

import fulcrum
from cli import run, run_json
from fulcrum import work

MASKS = ["causal", "full", "sliding:1", "sliding:37", "prefix:0", "prefix:50"]


def random_row(rng):
    """A random row: (cp, block_size, doc lengths, mask). Some rows are made
    divisible so that head_tail and ptrr serve rather than fall back."""
    cp = int(rng.choice([1, 2, 3, 4, 5, 8, 16]))
    block = int(rng.choice([1, 2, 8, 16, 64, 128]))
    if rng.random() < 0.4:
        tokens = cp * block * int(rng.integers(1, 6)) * 2
    else:
        tokens = int(rng.integers(1, 3000))
    cuts = np.sort(rng.choice(np.arange(1, tokens), size=min(tokens - 1, int(rng.integers(0, 12))),
                              replace=False)) if tokens > 1 else np.array([], dtype=int)
    docs = np.diff(np.concatenate([[0], cuts, [tokens]])).astype(int).tolist()
    return cp, block, docs, str(rng.choice(MASKS))


def brute_force(positions, docs, block, mask):
    """Pairs and tiles recounted from the explicit mask matrix; shares no code
    with the package's or the core's counting."""
    tokens = sum(docs)
    doc = np.repeat(np.arange(len(docs)), docs)
    local = np.arange(tokens) - np.repeat(np.cumsum([0] + docs[:-1]), docs)
    i, j = local[:, None], local[None, :]
    same = doc[:, None] == doc[None, :]
    kind, _, param = mask.partition(":")
    allowed = {
        "causal": lambda: j <= i,
        "full": lambda: np.ones_like(same),
        "sliding": lambda: (j <= i) & (j > i - int(param or 0)),
        "prefix": lambda: (j <= i) | (j < int(param or 0)),
    }[kind]() & same
    pairs, tiles = [], []
    for shard in positions:
        real = shard[shard >= 0]
        pairs.append(int(allowed[real].sum()))
        count = 0
        for start in range(0, len(shard), block):
            rows = shard[start:start + block]
            rows = rows[rows >= 0]
            if rows.size:
                keys = np.flatnonzero(allowed[rows].any(axis=0))
                count += np.unique(keys // block).size
        tiles.append(count)
    return pairs, tiles


@pytest.mark.parametrize("seed", range(24))
def test_every_strategy_matches_the_cli(seed, balancer, figureless_balancer, cli_path,
                                        plugin_path, tmp_path):
    rng = np.random.default_rng(seed)
    cp, block, docs, mask = random_row(rng)
    lengths_file = tmp_path / "row.json"
    lengths_file.write_text(json.dumps(docs))
    expected = run_json(cli_path, "plan", "--compare", "--positions", "--cp", cp, "--block-size",
                        block, "--mask", mask, "--doc-lengths-file", lengths_file,
                        plugin=plugin_path)
    assert expected["workload"]["tokens"] == sum(docs)
    assert [s["requested"] for s in expected["strategies"]] == balancer.cp_strategies
    for want, b in [(w, b) for w in expected["strategies"] for b in (balancer, figureless_balancer)]:
        plan = b.plan_cp(want["requested"], cp=cp, doc_lengths=docs, block_size=block, mask=mask)
        assert plan.work_source == ("plugin" if b is balancer else "python")
        assert (plan.positions.reshape(-1)[plan.restore] == np.arange(plan.tokens)).all()
        got = plan.to_json(positions=True)
        where = (f"strategy {want['requested']} on cp={cp} block={block} mask={mask} docs={docs}, "
                 f"figures from the {plan.work_source}")
        for key in ("requested", "used", "cp", "block_size", "tokens", "padding", "ranks",
                    "imbalance", "tiles_over_ideal"):
            assert got[key] == want[key], f"{key} differs for {where}"
        if want["fallback_reason"] is None:
            assert got["fallback_reason"] is None, where
        else:
            # The CLI states the host's rule; the package quotes the plugin,
            # whose message contains the same rule.
            assert want["fallback_reason"] in got["fallback_reason"], where


@pytest.mark.parametrize("seed", range(12))
def test_numpy_work_model_matches_the_plugin_and_a_brute_force_recount(seed, balancer):
    rng = np.random.default_rng(100 + seed)
    cp, block, docs, mask = random_row(rng)
    if sum(docs) > 1200:  # the recount is quadratic
        docs = docs[:1] if docs[0] <= 1200 else [int(rng.integers(1, 1200))]
    tokens = sum(docs)
    for strategy in balancer.cp_strategies:
        plan = balancer.plan_cp(strategy, cp=cp, doc_lengths=docs, block_size=block, mask=mask)
        assert plan.work_source == "plugin"
        rank_tokens, pairs, tiles = work.rank_work(plan.positions, tokens, docs, block, mask)
        assert rank_tokens.tolist() == plan.rank_tokens.tolist()
        assert pairs.tolist() == plan.rank_pairs.tolist(), strategy
        assert tiles.tolist() == plan.rank_tiles.tolist(), strategy
        want_pairs, want_tiles = brute_force(plan.positions, docs, block, mask)
        assert pairs.tolist() == want_pairs, strategy
        assert tiles.tolist() == want_tiles, strategy
    identity = np.arange(tokens).reshape(1, -1)
    assert work.unsharded_tiles(tokens, docs, block, mask) == brute_force(identity, docs, block,
                                                                          mask)[1][0]


def test_restore_inverts_the_plan(balancer):
    plan = balancer.plan_cp("balanced", cp=4, doc_lengths=[100, 37, 500, 3], block_size=16)
    flat = plan.positions.reshape(-1)
    assert plan.padding == int((flat < 0).sum())
    assert (flat[plan.restore] == np.arange(plan.tokens)).all()


@pytest.mark.parametrize("seed", range(16))
def test_dp_partitions_match_the_cli(seed, balancer, cli_path, plugin_path, tmp_path):
    rng = np.random.default_rng(1000 + seed)
    n = int(rng.integers(1, 200))
    lengths = rng.integers(1, int(rng.choice([100, 5000, 200000])), size=n).tolist()
    dp = int(rng.integers(1, 17))
    cost = str(rng.choice(["tokens", "attention", "attention:0", "attention:1024.5"]))
    equal = bool(rng.random() < 0.5)
    lengths_file = tmp_path / "lengths.json"
    lengths_file.write_text(json.dumps(lengths))
    for strategy in balancer.dp_strategies:
        args = ["dp-partition", "--dp", dp, "--strategy", strategy, "--cost", cost,
                "--lengths-file", lengths_file] + (["--equal-count"] if equal else [])
        code, want, stderr = run(cli_path, *args, plugin=plugin_path)
        if code != 0:
            # The host refused the plugin's answer; the package must too, for
            # the same reason.
            with pytest.raises(fulcrum.FulcrumError) as refused:
                balancer.partition_dp(lengths, dp, strategy, cost=cost, equal_count=equal)
            assert refused.value.message in stderr, stderr
            continue
        got = balancer.partition_dp(lengths, dp, strategy, cost=cost, equal_count=equal)
        assert got.to_json() == want, f"{strategy} dp={dp} cost={cost} equal={equal}"
        assert sorted(np.concatenate(got.ranks).tolist()) == list(range(n))
