"""benchmarks/slot_bias.py: the loader's draw mirrored bit for bit (the
standard's mt19937_64 value, and a job trained here rebuilt member for
member), a job whose batches are not the rebuilt ones refused, and the
analysis on synthetic records (test_reprice_fit.py's generator): exact
without noise, a planted member-0 penalty measured exactly, a planted
receive-only exchange cost recovered only by the fit that prices received
and sent K/V apart, a planted partial-tile premium only by the fit that
prices full and partial tiles apart, and a planted constant for members with
peers only by the fit with "multi"; the start profile of records made in
another clone found in this one; the full/partial split of a member's
tiles, the kernel's chunks and its query-block visits (one call, or the
overlapped exchange's calls per group of key blocks) against a pair-by-pair
recount of the mask."""

import itertools
import json
import math
import pathlib
import random
import subprocess

import pytest

import scripts

ROOT = pathlib.Path(__file__).resolve().parents[2]


slot_bias = scripts.benchmark("slot_bias")
jobs = scripts.load("reprice_fit_jobs", pathlib.Path(__file__).with_name("test_reprice_fit.py"))


def test_mt19937_64_gives_the_standards_ten_thousandth_value():
    # [rand.predef]: the 10000th invocation of a default-constructed
    # std::mt19937_64 (seed 5489) produces 9981545732273789042.
    rng = slot_bias.Mt19937_64(5489)
    for _ in range(9999):
        rng()
    assert rng() == 9981545732273789042


def test_every_sample_is_served_once_an_epoch_cut_at_seq_length():
    rng = random.Random(3)
    lengths = [rng.choice([0, rng.randint(1, 900)]) for _ in range(97)]
    batch, seq = 8, 256
    real = [n for n in lengths if n > 0]
    steps = -(-len(real) // batch)
    docs = slot_bias.step_documents(lengths, seq, 7, batch, steps)
    pieces = [d for step in docs for d in step]
    assert all(1 <= d <= seq for d in pieces)
    assert sum(pieces) == sum(real)
    # Each sample is its full pieces then one remainder: a recount of the
    # pieces a sample of n tokens becomes.
    want = sorted(p for n in real for p in [seq] * (n // seq) + ([n % seq] if n % seq else []))
    assert sorted(pieces) == want
    assert docs != slot_bias.step_documents(lengths, seq, 8, batch, steps)


def tiny_job(folder, cli, seed=3):
    """A W = 2 hybrid job with the three schedulers compared, as
    hybrid_train.py writes its folder (wN.yaml, lengths.json, wN.jsonl)."""
    rng = random.Random(5)
    (folder / "lengths.json").write_text(json.dumps([rng.randint(5, 300) for _ in range(60)]))
    start = ROOT / "configs" / "profiles" / "cpu_calibrated.yaml"
    (folder / "w2.yaml").write_text(
        "parallel: {mode: hybrid, world_size: 2, max_tokens_per_rank: 128}\n"
        "balancer:\n"
        f"  schedule: {{strategy: hybrid, profile: auto, profile_start: {start}, refit_every: 1}}\n"
        "  cp: {strategy: auto, block_size: 16, mask: causal}\n"
        f"data: {{source: synthetic, path: {folder / 'lengths.json'}, seq_length: 256,\n"
        f"       packing: true, global_batch_size: 8, micro_batch_size: 1, seed: {seed}}}\n"
        'model: {"hidden_size": 16, "num_layers": 1, "num_heads": 2, "vocab_size": 64}\n'
        "train: {steps: 3, dtype: float32, threads: 1, lr: 1.0e-3}\n"
        "dist: {timeout_s: 60, op_timeout_s: 120}\n")
    run = subprocess.run([str(cli), "train", "--config", str(folder / "w2.yaml"), "--metrics",
                          str(folder / "w2.jsonl"), "--compare-schedulers",
                          "fixed,megatron_dcp,hybrid", "--compare-repetitions", "1"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, cli_path):
    folder = tmp_path_factory.mktemp("w2")
    tiny_job(folder, cli_path)
    return folder


def test_a_trained_job_is_rebuilt_member_for_member(trained, cli_path):
    steps = slot_bias.attach(str(trained), str(cli_path), 2)
    assert len(steps) == 2
    kv = 2 * 16 * 1 * 4  # K and V, hidden 16, one layer, float32
    members = slot_bias.re_.members_of(steps.values())
    assert len(members) > 20
    plans = set()
    partial = full = 0
    for m in members:
        # attach stops on any mismatch; what it adds is consistent.
        assert abs(m["received"] + m["sent"] - m["kv"] / kv) < 1e-6
        assert m["padding"] >= 0 and m["docs"] >= 1 and 0 <= m["member"] < m["g"]
        assert m["multi"] == float(m["g"] > 1)
        # The runtime records each member's partial tiles; attach checks
        # them against the recount from the plan's positions.
        assert 0 <= m["partial_recorded"] <= m["tiles"]
        assert m["partial"] == m["partial_recorded"]
        partial += m["partial"]
        full += m["full"]
        plans.add(m["plan"])
    assert "per_document_padded" in plans  # megatron_dcp's slots
    assert {m["multi"] for m in members} == {0.0, 1.0}
    assert partial > 0 and full > 0


def test_a_job_of_other_batches_is_refused(trained, cli_path, tmp_path):
    for name in ("w2.jsonl", "lengths.json"):
        (tmp_path / name).write_text((trained / name).read_text())
    text = (trained / "w2.yaml").read_text().replace("seed: 3", "seed: 4")
    (tmp_path / "w2.yaml").write_text(text.replace(str(trained), str(tmp_path)))
    with pytest.raises(SystemExit) as stop:
        slot_bias.attach(str(tmp_path), str(cli_path), 2)
    assert "rebuilt" in str(stop.value) or "slot_ranks" in str(stop.value)


def synthetic_steps(tmp_path, seed, world=4, count=4, penalty=1.0, receive_cost=0.0,
                    partial_cost=0.0, multi_cost=0.0):
    """test_reprice_fit's job with each member described: its index, member 0
    of every two-member slot flagged as a per-document head-tail holder, its
    K/V tokens split at random into received and sent, its tiles into full
    and partial; member 0's time times `penalty`, `receive_cost` seconds per
    received token, `partial_cost` per partial tile and `multi_cost` per
    member of a slot with peers added."""
    path = tmp_path / f"w{world}.jsonl"
    jobs.write_job(path, random.Random(seed), world, count)
    steps = slot_bias.rf.load([str(path)], 2)
    rng = random.Random(seed + 1)
    for step in steps.values():
        for sched in step.values():
            for s, ms in slot_bias.rf.slot_members(sched).items():
                ranks = sched["slots"][s][0]
                for m in ms:
                    m["member"] = ranks.index(m["rank"])
                    m["head_tail_first"] = float(len(ms) == 2 and m["member"] == 0)
                    share = rng.random() if len(ms) > 1 else 0.0
                    m["received"] = share * m["kv"] / 1024
                    m["sent"] = (1 - share) * m["kv"] / 1024 if len(ms) > 1 else 0.0
                    m["padding"], m["docs"], m["plan"] = 0, 1, "balanced"
                    m["partial"] = float(rng.randint(0, int(m["tiles"])))
                    m["full"], m["pieces"] = m["tiles"] - m["partial"], 1.0
                    m["multi"] = float(len(ms) > 1)
                    if m["head_tail_first"]:
                        m["seconds"] *= penalty
                    m["seconds"] += (receive_cost * m["received"] + partial_cost * m["partial"]
                                     + multi_cost * m["multi"])
    return steps


def test_without_noise_every_layer_and_split_is_exact(tmp_path):
    steps = synthetic_steps(tmp_path, 21)
    for ratios in slot_bias.layers(steps, "loo").values():
        for v in ratios.values():
            assert abs(v - 1) < 1e-6
    for measured, predicted, _ in slot_bias.slot_spread(steps, "fwd1").values():
        assert abs(measured - predicted) < 1e-6
    table = slot_bias.splits(steps, "loo")
    assert table and all(abs(e) < 1e-6 for v in table.values() for e in v)


def test_the_member_zero_gap_against_the_truth(tmp_path):
    steps = synthetic_steps(tmp_path, 22, penalty=1.2)
    gaps = slot_bias.member_gap(steps, coef=jobs.TRUTH)
    assert gaps
    for mean, count, slower in gaps.values():
        assert abs(mean - math.log(1.2)) < 1e-9 and slower == count


def assert_only_terms_recover(steps, terms):
    """`terms` price the planted cost exactly, member for member and in both
    speed-ups; today's terms miss it."""
    apart = slot_bias.candidate(steps, "loo", terms, False)
    today = slot_bias.candidate(steps, "loo", slot_bias.ROW, False)
    assert max(apart["rank"].values()) < 1e-6
    assert max(today["rank"].values()) > 1e-3
    for base, measured, predicted in slot_bias.gains(apart["critical"]):
        assert abs(measured - predicted) < 1e-6, base


def test_received_and_sent_apart_recover_a_receive_only_cost(tmp_path):
    steps = synthetic_steps(tmp_path, 23, count=5, receive_cost=4e-5)
    assert_only_terms_recover(steps, slot_bias.SPLIT_EXCHANGE)


def test_one_slot_end_wait_is_rank_errors(tmp_path):
    steps = synthetic_steps(tmp_path, 24, count=4)
    noise = random.Random(25)
    for m in slot_bias.re_.members_of(steps.values()):
        m["seconds"] *= noise.uniform(0.8, 1.5)
    train = [steps[k] for k in sorted(steps)[:3]]
    coef = slot_bias.re_.fit_weighted(slot_bias.re_.members_of(train), slot_bias.ROW, False)
    mine = slot_bias.fit_waits(train, lambda m: slot_bias.re_.price(m, coef), False)
    assert mine["all"] > 0
    assert abs(mine["all"] - slot_bias.re_.fit_wait(train, coef)) < 1e-12


def test_full_and_partial_apart_recover_a_partial_tile_premium(tmp_path):
    steps = synthetic_steps(tmp_path, 26, count=5, partial_cost=3e-4)
    assert_only_terms_recover(steps, slot_bias.SPLIT_TILES)


def test_a_constant_for_members_with_peers_is_recovered_by_multi(tmp_path):
    steps = synthetic_steps(tmp_path, 27, count=5, multi_cost=2e-3)
    assert_only_terms_recover(steps, slot_bias.ROW + ["multi"])
    # The candidate the script reports fits it too.
    assert slot_bias.CANDIDATES["row + multi"][0] == slot_bias.ROW + ["multi"]


def test_multi_is_dropped_first_where_every_member_has_peers(tmp_path):
    steps = synthetic_steps(tmp_path, 28, count=4)
    wide = [m for m in slot_bias.re_.members_of(steps.values()) if m["multi"] == 1.0]
    assert wide
    # multi is then the constant: the fit is the one without it.
    without = slot_bias.rf.fit(wide, slot_bias.ROW)
    assert slot_bias.rf.fit(wide, slot_bias.ROW + ["multi"]) == without


def test_the_start_profile_is_found_in_this_clone_when_moved(tmp_path):
    mine = tmp_path / "cpu_calibrated.yaml"
    mine.write_text("name: mine\n")
    assert slot_bias.start_profile(str(mine)) == str(mine)  # where the job left it
    here = ROOT / "configs" / "profiles" / "cpu_calibrated.yaml"
    moved = "/elsewhere/configs/profiles/cpu_calibrated.yaml"
    assert pathlib.Path(slot_bias.start_profile(moved)).resolve() == here
    assert slot_bias.start_profile("h100_7b") == "h100_7b"  # a bundled profile's name
    assert slot_bias.start_profile(None) is None
    # A file in neither place: stopped, naming it.
    with pytest.raises(SystemExit) as stop:
        slot_bias.start_profile("/elsewhere/none.yaml")
    assert "/elsewhere/none.yaml" in str(stop.value)
    # The profile each step planned with, from records made elsewhere: the
    # refit's terms and this clone's start file's ranks_per_node.
    config = {"profile": "auto", "profile_start": moved, "world": 4}
    refit = {"tile_seconds": 1e-4, "token_seconds": 2e-6, "slot_seconds": 3e-3,
             "kv_bytes_per_token": 512, "bytes_per_second": 1e9, "latency_seconds": 1e-3,
             "row_token_seconds": 0.0}
    records = [{"step": 3, "profile_fit": {"profile": refit}}]
    def planned_with(config, step):
        return pathlib.Path(slot_bias.hybrid_profile(config, records, step, str(tmp_path)))

    assert planned_with(config, 3).resolve() == here
    written = planned_with(config, 4).read_text()
    nodes = slot_bias.config_value(here.read_text(), "ranks_per_node")
    assert nodes and f"ranks_per_node: {nodes}" in written
    assert "tile_seconds: 0.0001" in written
    fixed = dict(config, profile=moved)  # a job with a fixed profile file
    assert planned_with(fixed, 4).resolve() == here


def pair_by_pair(rows, docs, block, chunk_keys, split, members=None, me=0, two_calls=False):
    """The split recounted from the dense mask: every (query, key) pair of
    every (query block, key block), no intervals; the kernel's chunks as
    runs of touched key blocks (split: each cut into its stretches of full
    and of partial blocks) cut every chunk_keys // block blocks, masked when
    one pair of the query block's rows (pads included) and the chunk's keys
    is not allowed. Visits: without `members`, two per query block with a
    touched key block; with them (every member's rows, this one `me`), as
    attention::make_overlap_plan groups the blocks: the peers of the slot
    are the other members holding a token of a touched key block, in rank
    order; forward a block goes to the group after its last peer (its own
    keys alone: group 0), backward to its first peer's (alone: the last
    group); a query block is visited once per group holding one of its
    touched key blocks, in each pass. `two_calls`: the groups between the
    first and the last are empty, the blocks with a peer in the forward's
    last group and the backward's first."""
    doc_of = [i for i, n in enumerate(docs) for _ in range(n)]
    n_tokens = len(doc_of)

    def allowed(q, k):
        return 0 <= q < n_tokens and doc_of[k] == doc_of[q] and k <= q

    owner = {}
    for member, held in enumerate(members or []):
        for q in held:
            if 0 <= q < n_tokens:
                owner[q] = member

    def peers_of(kb):
        return sorted({owner[k] for k in range(kb * block, min(n_tokens, (kb + 1) * block))
                       if owner.get(k, me) != me})

    full = partial = chunks = masked = visits = 0
    step = max(1, chunk_keys // block)
    for first in range(0, len(rows), block):
        queries = rows[first:first + block]
        touched, whole = [], set()
        for k0 in range(0, n_tokens, block):
            keys = range(k0, min(n_tokens, k0 + block))
            count = sum(1 for q in queries for k in keys if allowed(q, k))
            if count == block * block:
                full += 1
                whole.add(k0 // block)
            elif count:
                partial += 1
            if count:
                touched.append(k0 // block)
        if members is None:
            visits += 2 if touched else 0
        else:
            slot_peers = sorted({p for kb in range(ceil(n_tokens, block)) for p in peers_of(kb)
                                 if any(allowed(q, k) for q in rows
                                        for k in range(kb * block,
                                                       min(n_tokens, (kb + 1) * block)))})
            groups = len(slot_peers) + 1
            forward = {(groups - 1 if two_calls else slot_peers.index(peers_of(kb)[-1]) + 1)
                       if peers_of(kb) else 0 for kb in touched}
            backward = {(0 if two_calls else slot_peers.index(peers_of(kb)[0]))
                        if peers_of(kb) else groups - 1 for kb in touched}
            visits += len(forward) + len(backward)
        runs = []
        for kb in touched:
            joins = (bool(runs) and kb == runs[-1][-1] + 1
                     and (not split or (kb in whole) == (runs[-1][-1] in whole)))
            if joins:
                runs[-1].append(kb)
            else:
                runs.append([kb])
        for run in runs:
            for i in range(0, len(run), step):
                keys = range(run[i] * block, min(n_tokens, (run[min(i + step, len(run)) - 1] + 1)
                                                 * block))
                chunks += 1
                masked += any(not allowed(q, k) for q in queries for k in keys)
    # A piece: consecutive positions of one document share (document,
    # position - index).
    real = [q for q in rows if 0 <= q < n_tokens]
    pieces = len(list(itertools.groupby(doc_of[q] * (1 << 32) + q - i for i, q in enumerate(real))))
    return full, partial, pieces, chunks, masked, visits


def ceil(a, b):
    return -(-a // b)


def test_the_tile_split_is_the_pair_by_pair_recount():
    rng = random.Random(27)
    for _ in range(400):
        docs = [rng.randint(1, 40) for _ in range(rng.randint(1, 5))]
        n_tokens = sum(docs)
        block = rng.choice([1, 2, 3, 4, 8])
        rows = list(range(n_tokens))
        kind = rng.random()
        if kind < 0.4:
            rng.shuffle(rows)
        elif kind < 0.7:
            cut = rng.randint(0, n_tokens)
            rows = rows[cut:] + rows[:cut]
        rows = rows[:rng.randint(1, n_tokens)]
        for _ in range(rng.randint(0, 3)):  # pad rows anywhere
            rows.insert(rng.randint(0, len(rows)), rng.choice([-1, n_tokens + 5]))
        chunk_keys = rng.choice([1, 4, 8, 16, 512])
        for split in (True, False):
            assert (slot_bias.causal_tile_split(rows, docs, block, chunk_keys, split)
                    == pair_by_pair(rows, docs, block, chunk_keys, split)), \
                (rows, docs, block, chunk_keys, split)


def test_the_overlaps_visits_are_the_pair_by_pair_recount():
    rng = random.Random(28)
    many = fewer = 0
    for _ in range(150):
        docs = [rng.randint(1, 30) for _ in range(rng.randint(1, 4))]
        n_tokens = sum(docs)
        block = rng.choice([1, 2, 4, 8])
        g = rng.randint(2, 5)
        order = list(range(n_tokens))
        if rng.random() < 0.5:
            rng.shuffle(order)
        cuts = sorted(rng.randint(0, n_tokens) for _ in range(g - 1))
        members = [order[a:b] for a, b in zip([0] + cuts, cuts + [n_tokens])]
        for held in members:  # pad rows anywhere; some positions held by no one
            for _ in range(rng.randint(0, 2)):
                held.insert(rng.randint(0, len(held)), -1)
            if held and rng.random() < 0.2:
                held.remove(rng.choice(held))
        for me, rows in enumerate(members):
            holder = {p: (None if m == me else m)
                      for m, held in enumerate(members) for p in held if p >= 0}
            got = slot_bias.causal_tile_split(rows, docs, block, 512, True, holder=holder)
            want = pair_by_pair(rows, docs, block, 512, True, members, me)
            assert got == want, (members, me, docs, block)
            many += got[5] > 2 * ceil(len(rows), block)
            two = slot_bias.causal_tile_split(rows, docs, block, 512, True, holder=holder,
                                              two_calls=True)
            assert two == pair_by_pair(rows, docs, block, 512, True, members, me, True), \
                (members, me, docs, block)
            assert two[:5] == got[:5] and two[5] <= got[5]
            fewer += two[5] < got[5]
    assert many > 50  # most members visit some query block more than once
    assert fewer > 20  # two calls a pass visit fewer where a block has peers of its own
