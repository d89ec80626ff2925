#!/usr/bin/env python3
"""Where does a compared schedule's measured time go that its prediction
leaves out? Issue 21's bias (docs/HYBRID_RUNTIME.md section 12): the
prediction under-states hybrid's gain over megatron_dcp in every run.

Reads the jobs that benchmarks/hybrid_train.py leaves in its --out folders
(`wN.jsonl`, `wN.yaml`, `lengths.json`), rebuilds every compared schedule
and prices it as the job did:

- the step's documents are drawn as the trainer's loader draws them in
  hybrid mode (the seeded epoch order of the synthetic lengths, one sample
  a row, cut at data.seq_length; include/fulcrum/core/random.h);
- `fulcrum schedule` places them with `fixed`, `megatron_dcp` and `hybrid`
  (hybrid with the profile the step planned with: under `profile: auto` the
  refit of the step before, from its `profile_fit` record);
- every slot member must have the tokens and tiles of its `fit_samples` row
  and hybrid's predicted step must be the job's to the microsecond, or the
  script stops: the records then came from another build or config.

Each member then carries what the records alone do not say: the CP plan of
its slot, its index in the slot, the slot's documents, its padding, and the
K/V tokens it receives and sends. The fit is reprice_fit.py's (the job's own
least squares), held out as the job holds it out (`fwd2`: each step by the
fit of the two before it) or one step at a time (`loo`), and it prints:

- per scheduler, measured / predicted of the members' summed times, of the
  summed slot lengths (each slot as long as its slowest member) and of the
  replayed critical path: which layer adds the error;
- per scheduler and group size, a slot's slowest member over its mean,
  measured and predicted: the wait the model prices and the one it does not;
- the held-out log ratio measured / predicted of a member, per scheduler,
  split by what the member or its slot is (g; member 0 of a per-document
  head-tail plan, or not; tiles, tokens and K/V bytes by tercile; padding;
  the slot's plan rule and its number of documents; the rank's slot count;
  the slot's position in the rank's timeline);
- per step and scheduler, member 0 against member 1 of every two-member slot;
- candidate fits held out: today's terms; received and sent K/V priced
  apart; a factor on member 0 of per-document plans; full and partial tiles
  priced apart, and a price per document piece; a price per kernel chunk
  and per masked chunk; a price per query-block visit (each kernel call's
  query blocks: one call, or one per group of the overlapped exchange),
  alone and with the tiles apart; a constant for every member of a slot
  with peers ("multi": its second kernel call and the exchange's waits,
  whatever the number of peers), with and without the tiles apart and the
  visits; with the per-rank error and the error of the predicted
  speed-ups.

A member's tiles are split into full ones (every query of the block may
attend every key of the key block) and partial ones (a causal diagonal, a
document edge, a query block that spans runs of the plan, or a short block)
from its positions, which `fulcrum plan --positions` gives for the slot's
documents, plan rule and size; the two must add up to the member's recorded
tiles. Its pieces are its maximal runs of consecutive positions of one
document.

    python3 benchmarks/slot_bias.py --kernel whole-chunks build/hbq2_w4 build/hbq2_w6 build/hbq2_w8

(`--kernel` names the masking the jobs' kernel used, for the chunk counts:
whole-chunks for jobs before 2026-11-27 14:37 UTC.)
"""

import argparse
import importlib.util
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))


def _module(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(_HERE, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


re_ = _module("rank_error")
rf = re_.rf
SCHEDULERS = rf.SCHEDULERS
ROW = rf.MODELS["row"]
SPLIT_EXCHANGE = ["tiles", "tokens", "one", "row", "received", "sent", "peers"]
SPLIT_TILES = ["full", "partial"] + [t for t in ROW if t != "tiles"]
# The kernel's key chunk (KernelOptions::chunk_keys).
CHUNK_KEYS = 512
# The coefficients a candidate's report names, with their units.
FITTED = [("received", "token"), ("sent", "token"), ("full", "tile"), ("partial", "tile"),
          ("pieces", "piece"), ("chunks", "chunk"), ("masked", "masked chunk"),
          ("visits", "visit"), ("multi", "multi-rank member")]
M64 = (1 << 64) - 1


class Mt19937_64:
    """std::mt19937_64: its output sequence is fixed by the C++ standard."""

    def __init__(self, seed):
        self.mt = [seed & M64]
        for i in range(1, 312):
            prev = self.mt[-1]
            self.mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & M64)
        self.index = 312

    def __call__(self):
        if self.index >= 312:
            for k in range(312):
                x = (self.mt[k] & 0xFFFFFFFF80000000) | (self.mt[(k + 1) % 312] & 0x7FFFFFFF)
                xa = (x >> 1) ^ (0xB5026F5AA96619E9 if x & 1 else 0)
                self.mt[k] = self.mt[(k + 156) % 312] ^ xa
            self.index = 0
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        return (y ^ (y >> 43)) & M64


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def derive_seed(seed, stream):
    return mix64(seed ^ mix64(stream))


def draw_below(rng, bound):
    reject_below = ((1 << 64) - bound) % bound
    while True:
        r = rng()
        if r >= reject_below:
            return r % bound


def step_documents(lengths, seq_length, seed, batch, steps):
    """The documents of steps 1 .. `steps` of the first epoch in hybrid
    mode: the samples with tokens in the loader's seeded order (a
    Fisher-Yates shuffle from the back), `batch` a step, each sample cut at
    multiples of seq_length."""
    order = [i for i, n in enumerate(lengths) if n > 0]
    rng = Mt19937_64(derive_seed(seed, 0))
    for i in range(len(order), 1, -1):
        j = draw_below(rng, i)
        order[i - 1], order[j] = order[j], order[i - 1]
    out = []
    for k in range(steps):
        docs = []
        for sample in order[k * batch:(k + 1) * batch]:
            left = lengths[sample]
            while left > 0:
                docs.append(min(left, seq_length))
                left -= seq_length
        out.append(docs)
    return out


def config_value(text, key):
    found = re.search(r"\b" + key + r"\"?:\s*([^,}\n]+)", text)
    return found.group(1).strip() if found else None


def job_config(folder):
    """The W's config as hybrid_train.py writes it (flow-style YAML)."""
    names = [n for n in os.listdir(folder) if re.fullmatch(r"w\d+\.yaml", n)]
    if len(names) != 1:
        sys.exit(f"{folder}: expected one wN.yaml (a hybrid_train.py --out folder), found {names}")
    with open(os.path.join(folder, names[0])) as f:
        text = f.read()
    world = int(config_value(text, "world_size"))
    return {"world": world, "metrics": os.path.join(folder, f"w{world}.jsonl"),
            "lengths": config_value(text, "path"),
            "T": int(config_value(text, "max_tokens_per_rank")),
            "block": int(config_value(text, "block_size")), "mask": config_value(text, "mask"),
            "seq_length": int(config_value(text, "seq_length")),
            "batch": int(config_value(text, "global_batch_size")),
            "seed": int(config_value(text, "seed")), "profile": config_value(text, "profile"),
            "profile_start": config_value(text, "profile_start"),
            # parallel.hybrid.overlap (default on): off, every member makes
            # one kernel call per pass.
            "overlap": config_value(text, "overlap") != "false",
            # parallel.hybrid.overlap_calls, which hybrid_train.py writes
            # since the key exists; records without it ran a call per peer.
            "two_calls": config_value(text, "overlap_calls") == "two_a_pass",
            # The model's K and V of one token over all layers (the trainer's
            # model_kv_bytes_per_token): what a record's kv bytes count.
            "kv_bytes_per_token": 2 * int(config_value(text, "hidden_size"))
            * int(config_value(text, "num_layers"))
            * (8 if config_value(text, "dtype") == "float64" else 4)}


def start_profile(path):
    """A profile the job recorded (its profile, or profile_start under
    auto): its file where the job left it, else, for records made in
    another clone (an archive's), the file of that name in this clone's
    configs/profiles; a bundled profile's name as it is. Stops, naming the
    file, where it is in neither place."""
    if not path or os.path.isfile(path):
        return path
    here = os.path.join(_HERE, "..", "configs", "profiles", os.path.basename(path))
    if os.path.isfile(here):
        return here
    if os.sep in path or path.endswith((".yaml", ".yml")):
        sys.exit(f"{path}: the job's profile file is not there, and this clone's "
                 f"configs/profiles has no {os.path.basename(path)}; give the records their "
                 "profile file at that path")
    return path


def profile_text(refit, start_file, name):
    """A profile file of a refit's terms; ranks_per_node and exchange_overlap
    (not refitted) from the start profile's file."""
    keep = {"ranks_per_node": "8", "exchange_overlap": "0"}
    if start_file and os.path.isfile(start_file):
        with open(start_file) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in keep:
                    keep[key.strip()] = value.strip()
    bw = refit["bytes_per_second"]
    terms = [("tile_seconds", refit["tile_seconds"]), ("token_seconds", refit["token_seconds"]),
             ("slot_seconds", refit["slot_seconds"]),
             ("kv_bytes_per_token", refit["kv_bytes_per_token"]),
             ("intra_node_bytes_per_second", bw), ("inter_node_bytes_per_second", bw),
             ("latency_seconds", refit["latency_seconds"]),
             ("row_token_seconds", refit["row_token_seconds"]),
             # Records from before the partial-tile term have none: 0.
             ("partial_tile_seconds", refit.get("partial_tile_seconds", 0.0))]
    return (f"name: {name}\n" + "".join(f"{k}: {v!r}\n" for k, v in terms)
            + "".join(f"{k}: {v}\n" for k, v in keep.items()))


def hybrid_profile(config, records, step, scratch):
    """The profile hybrid planned step `step` with: under profile auto the
    refit after the step before (its profile_fit), else the configured one."""
    if config["profile"] != "auto":
        return start_profile(config["profile"])
    refits = [r["profile_fit"]["profile"] for r in records
              if r.get("step") == step - 1 and "profile_fit" in r]
    if not refits:
        return start_profile(config["profile_start"]) or "cpu_gloo"
    path = os.path.join(scratch, f"w{config['world']}_step{step}.yaml")
    with open(path, "w") as f:
        f.write(profile_text(refits[0], start_profile(config["profile_start"]), f"refit_{step}"))
    return path


def refit_prices(folder):
    """(step, (a + e) / a) of every refit the job recorded: what a partial
    tile cost against a full one in the profile fitted after that step."""
    with open(job_config(folder)["metrics"]) as f:
        records = [json.loads(line) for line in f if line.strip()]
    out = []
    for r in records:
        fit = r.get("profile_fit")
        if fit and fit.get("refitted"):
            a = fit["profile"].get("tile_seconds", 0.0)
            e = fit["profile"].get("partial_tile_seconds", 0.0)
            out.append((r["step"], (a + e) / a if a > 0 else math.nan))
    return out


def cli_schedule(cli, config, docs, strategy, profile, scratch):
    path = os.path.join(scratch, "documents.json")
    with open(path, "w") as f:
        json.dump(docs, f)
    cmd = [cli, "schedule", "--world", str(config["world"]), "--max-tokens-per-rank",
           str(config["T"]), "--lengths-file", path, "--strategy", strategy, "--block-size",
           str(config["block"]), "--mask", config["mask"], "--format", "json"]
    if profile:
        cmd += ["--profile", profile]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"fulcrum schedule --strategy {strategy} exited {run.returncode}: "
                 f"{run.stderr.strip()[-500:]}")
    return json.loads(run.stdout)


def ceil_div(a, b):
    return -(-a // b)


def causal_tile_split(rows, docs, block, chunk_keys=CHUNK_KEYS, split=True, holder=None,
                      two_calls=False):
    """(full, partial, pieces, chunks, masked, visits) of a member whose local rows
    are `rows` (global positions of the row of documents `docs`, in plan
    order; anything outside [0, N) a pad row) under the causal document
    mask, its query blocks `block` consecutive local rows against key blocks
    of `block` global positions. Each query's allowed keys are one interval
    (its document's start to itself), so a query block touches the key
    blocks of the union of its rows' intervals, and a key block is full only
    when the query block has `block` real rows and every row's interval
    covers it (which a short last key block never is). The kernel
    (runtime/attention/blocked_attention.cpp) takes each query block's
    touched key blocks as runs of adjacent blocks cut into chunks of at most
    `chunk_keys` keys, one matrix product each, and masks a whole chunk
    unless every row of the query block (a pad row never) may attend all its
    keys. `split` (attention::Masking::kFullApart, the runtime's kernel
    since the jobs of 2026-11-27 14:37 UTC) cuts each run first where its
    full tiles begin and end, so that full tiles are chunked apart, never
    masked; without it, kWholeChunks, the kernel the earlier records ran.
    The chunks are those of one kernel call over the member's whole
    schedule; with the exchange overlapped, a member of a slot of two or
    more runs the kernel once per group of peers' key blocks, which cuts
    its runs further, so its chunks are a lower bound.

    `visits` counts the query blocks each kernel call computes, forward and
    backward: one call over the whole schedule visits each query block with
    tiles once; the overlapped exchange (attention::make_overlap_plan) calls
    the kernel once per group of key blocks, forward by the last peer a key
    block needs (its own keys a group of their own), backward by the first,
    peers in rank order, so a query block is visited once per group among
    its key blocks; with `two_calls` (parallel.hybrid.overlap_calls:
    two_a_pass) the groups are two, the own keys' blocks and the rest.
    `holder` (global position -> member, this member's None) gives each key
    block's peers; without it (a one-member slot) one call. A key block's
    peers are taken as every member holding a token of it."""
    chunk_blocks = max(1, chunk_keys // block)
    starts, doc_of = [], []
    for i, n in enumerate(docs):
        starts.append(len(doc_of))
        doc_of += [i] * n
    n_tokens = len(doc_of)
    real = [p for p in rows if 0 <= p < n_tokens]
    pieces = sum(1 for i, p in enumerate(real)
                 if i == 0 or p != real[i - 1] + 1 or doc_of[p] != doc_of[real[i - 1]])
    full = partial = chunks = masked = visits = 0
    for first in range(0, len(rows), block):
        here = rows[first:first + block]
        spans = sorted((starts[doc_of[p]], p) for p in here if 0 <= p < n_tokens)
        if not spans:
            continue
        touched = set()
        lo, hi = spans[0]
        for a, b in spans[1:] + [(n_tokens + block, 0)]:
            if a > hi + 1:
                touched.update(range(lo // block, hi // block + 1))
                lo, hi = a, b
            else:
                hi = max(hi, b)
        latest_start = max(a for a, _ in spans)
        lowest_end = min(b for _, b in spans)
        whole = set()
        if len(spans) == block:
            whole = {k for k in touched
                     if k * block >= latest_start and (k + 1) * block - 1 <= lowest_end}
        full += len(whole)
        partial += len(touched) - len(whole)
        if holder is None:
            visits += 2
        else:
            forward, backward = set(), set()
            for k in touched:
                peers = {holder.get(p) for p in range(k * block, min((k + 1) * block, n_tokens))}
                peers.discard(None)
                if not peers:
                    first = last = "own"
                elif two_calls:  # every block with a peer in one group
                    first = last = "peers"
                else:
                    first, last = min(peers), max(peers)
                forward.add(last)
                backward.add(first)
            visits += len(forward) + len(backward)
        blocks = sorted(touched)
        run_starts = [k for i, k in enumerate(blocks) if i == 0 or k != blocks[i - 1] + 1]
        run_ends = [k for i, k in enumerate(blocks)
                    if i + 1 == len(blocks) or blocks[i + 1] != k + 1]
        for first_block, last_block in zip(run_starts, run_ends):
            stretches = [(first_block, last_block + 1, False)]
            if split and whole:
                a = min(max(min(whole), first_block), last_block + 1)
                b = min(max(max(whole) + 1, a), last_block + 1)
                stretches = [(first_block, a, False), (a, b, True), (b, last_block + 1, False)]
            for begin, end, is_full in stretches:
                for k in range(begin, end, chunk_blocks):
                    k0 = k * block
                    k1 = min(min(end, k + chunk_blocks) * block, n_tokens)
                    chunks += 1
                    if not is_full and (len(spans) < len(here) or latest_start > k0
                                        or lowest_end < k1 - 1):
                        masked += 1
    return full, partial, pieces, chunks, masked, visits


def plan_positions(cli, rule, g, docs, block, mask):
    """Each member's positions for one slot's plan (`fulcrum plan
    --positions`), or None where the CLI cannot give them (a weighted plan
    takes its weights from the schedule)."""
    key = (rule, g, tuple(docs), block, mask)
    if key not in _POSITIONS:
        _POSITIONS[key] = None
        if rule != "per_document_weighted":
            run = subprocess.run([cli, "plan", "--cp", str(g), "--strategy", rule, "--lengths",
                                  ",".join(map(str, docs)), "--block-size", str(block),
                                  "--mask", mask, "--positions", "--format", "json"],
                                 capture_output=True, text=True)
            try:
                answer = json.loads(run.stdout) if run.returncode == 0 else None
            except ValueError:
                answer = None
            if answer and answer.get("used") == rule:
                _POSITIONS[key] = [r["positions"] for r in answer["ranks"]]
    return _POSITIONS[key]


_POSITIONS = {}


def split_tiles(m, slot, cli, block, mask, where, split_kernel=True, overlap=True,
                two_calls=False):
    """The member's full and partial tiles, pieces, kernel chunks and masked
    chunks (causal masks), from its plan's positions; True when they could
    be had. Where not (a weighted plan, another mask), every tile partial, a
    piece per document and one masked chunk per CHUNK_KEYS / block tiles, so
    that the member still counts in every fit; the report says how many."""
    docs = [d["length"] for d in slot["documents"]]
    rows = (plan_positions(cli, slot["plan"], len(slot["group"]), docs, block, mask)
            if mask == "causal" else None)
    recorded = m.get("partial_recorded", -1)
    if rows is None:
        guess = float(ceil_div(int(m["tiles"]), max(1, CHUNK_KEYS // block)))
        # The runtime's own count where the record has it, else all partial.
        partial = float(recorded if recorded >= 0 else m["tiles"])
        m["full"], m["partial"], m["pieces"] = m["tiles"] - partial, partial, float(len(docs))
        m["chunks"] = m["masked"] = guess
        # At most one visit per group (its peers and its own keys; two
        # groups under two calls a pass) per query block and pass: an upper
        # bound.
        groups = min(m["peers"] + 1, 2) if two_calls else m["peers"] + 1
        m["visits"] = 2.0 * groups * ceil_div(int(m["tokens"]), block)
        return False
    holder = None
    if len(rows) > 1 and overlap:
        holder = {}
        for member, positions in enumerate(rows):
            for p in positions:
                holder[p] = None if member == m["member"] else member
    full, partial, pieces, chunks, masked, visits = causal_tile_split(
        rows[m["member"]], docs, block, split=split_kernel, holder=holder, two_calls=two_calls)
    if full + partial != m["tiles"]:
        sys.exit(f"{where}: rank {m['rank']} of slot {m['slot']} has {m['tiles']} tiles in the "
                 f"records but {full} full and {partial} partial from its plan's positions")
    if recorded >= 0 and recorded != partial:
        sys.exit(f"{where}: rank {m['rank']} of slot {m['slot']} has {recorded} partial tiles in "
                 f"the records but {partial} from its plan's positions")
    m["full"], m["partial"], m["pieces"] = float(full), float(partial), float(pieces)
    m["chunks"], m["masked"], m["visits"] = float(chunks), float(masked), float(visits)
    return True


def describe_member(m, slot, kv_bytes_per_token):
    """The member's slot facts that the records leave out."""
    index = slot["group"].index(m["rank"])
    mine = slot["members"][index]
    docs = [d["length"] for d in slot["documents"]]
    g = len(slot["group"])
    moved = mine["bytes_received"] + mine["bytes_sent"]
    tokens = m["kv"] / kv_bytes_per_token if kv_bytes_per_token else 0.0
    m["received"] = tokens * mine["bytes_received"] / moved if moved else 0.0
    m["sent"] = tokens * mine["bytes_sent"] / moved if moved else 0.0
    m["plan"], m["member"], m["docs"] = slot["plan"], index, len(docs)
    if slot["plan"] == "per_document_padded":
        shard = sum(2 * ceil_div(n, 2 * g) for n in docs)
    else:
        shard = max(x["tokens"] for x in slot["members"])
    m["padding"] = shard - m["tokens"]
    m["head_tail_first"] = float(g > 1 and index == 0 and slot["plan"].startswith("per_document"))
    m["multi"] = float(g > 1)  # a member of a slot with peers


def attach(folder, cli, first_step, split_kernel=True):
    """The job's measured steps (reprice_fit.load) with every member described
    from the rebuilt schedules; stops when a schedule does not match."""
    config = job_config(folder)
    with open(config["metrics"]) as f:
        records = [json.loads(line) for line in f if line.strip()]
    steps = rf.load([config["metrics"]], first_step)
    with open(config["lengths"] if os.path.isfile(config["lengths"] or "")
              else os.path.join(folder, "lengths.json")) as f:
        lengths = json.load(f)
    last = max(step for _, step in steps)
    documents = step_documents(lengths, config["seq_length"], config["seed"], config["batch"],
                               last)
    with tempfile.TemporaryDirectory() as scratch:
        for (path, step), scheds in steps.items():
            for n, sched in scheds.items():
                profile = hybrid_profile(config, records, step, scratch) if n == "hybrid" else None
                answer = cli_schedule(cli, config, documents[step - 1], n, profile, scratch)
                check_schedule(answer, sched, records, step, n, folder)
                for m in sched["members"]:
                    slot = answer["slots"][m["slot"]]
                    describe_member(m, slot, config["kv_bytes_per_token"])
                    m["split"] = split_tiles(m, slot, cli, config["block"], config["mask"],
                                             f"{folder} step {step} {n}", split_kernel,
                                             config["overlap"], config["two_calls"])
    return steps


def check_schedule(answer, sched, records, step, name, folder):
    where = f"{folder} step {step} {name}"
    if [s["group"] for s in answer["slots"]] != [ranks for ranks, _ in sched["slots"]]:
        sys.exit(f"{where}: the rebuilt schedule's slots differ from the record's slot_ranks; "
                 "was the job run with this build and its own wN.yaml?")
    for m in sched["members"]:
        slot = answer["slots"][m["slot"]]
        mine = slot["members"][slot["group"].index(m["rank"])]
        if (mine["tokens"], mine["tiles"]) != (m["tokens"], m["tiles"]):
            sys.exit(f"{where}: slot {m['slot']} rank {m['rank']} has {mine['tokens']} tokens, "
                     f"{mine['tiles']} tiles rebuilt against {m['tokens']}, {m['tiles']} recorded")
    predicted = [r["predicted_step_ms"] for r in records
                 if r.get("step") == step and r.get("compare") == name]
    if name == "hybrid" and predicted and abs(1e3 * answer["step_seconds"] - predicted[0]) > 1e-3:
        sys.exit(f"{where}: predicted step {1e3 * answer['step_seconds']:.3f} ms rebuilt against "
                 f"{predicted[0]:.3f} ms recorded: not the profile the job planned with")


def held_out(steps, mode, terms):
    """(test step, coefficients) per fold, the job's least squares."""
    for train_keys, test_key in re_.folds(steps, mode):
        yield test_key, re_.fit_weighted(re_.members_of([steps[k] for k in train_keys]),
                                         terms, False)


def layers(steps, mode):
    """Per scheduler: measured / predicted of the summed member times, the
    summed slot lengths and the critical paths, over the held-out steps."""
    sums = {n: [0.0] * 6 for n in SCHEDULERS}
    for key, coef in held_out(steps, mode, ROW):
        for n, sched in steps[key].items():
            measured = {(m["slot"], m["rank"]): m["seconds"] for m in sched["members"]}
            predicted = {(m["slot"], m["rank"]): re_.price(m, coef) for m in sched["members"]}
            by_slot = rf.slot_members(sched)
            row = [sum(measured.values()), sum(predicted.values()),
                   sum(max(measured[(s, m["rank"])] for m in ms) for s, ms in by_slot.items()),
                   sum(max(predicted[(s, m["rank"])] for m in ms) for s, ms in by_slot.items()),
                   rf.critical_path(sched["slots"], measured),
                   rf.critical_path(sched["slots"], predicted)]
            sums[n] = [a + b for a, b in zip(sums[n], row)]
    return {n: {"members": v[0] / v[1], "slots": v[2] / v[3], "critical": v[4] / v[5]}
            for n, v in sums.items() if v[1] > 0}


def slot_spread(steps, mode):
    """Per (scheduler, g > 1): the median over slots of the slowest member
    over the members' mean, measured and predicted."""
    out = {}
    for key, coef in held_out(steps, mode, ROW):
        for n, sched in steps[key].items():
            for ms in rf.slot_members(sched).values():
                if len(ms) < 2:
                    continue
                x = [m["seconds"] for m in ms]
                p = [re_.price(m, coef) for m in ms]
                cell = out.setdefault((n, len(ms)), ([], []))
                cell[0].append(max(x) / statistics.fmean(x))
                cell[1].append(max(p) / statistics.fmean(p))
    return {k: (statistics.median(a), statistics.median(b), len(a)) for k, (a, b) in out.items()}


def terciles(values):
    v = sorted(values)
    return v[len(v) // 3], v[2 * len(v) // 3]


def bin_of(value, edges):
    return "low" if value < edges[0] else "mid" if value < edges[1] else "high"


def member_bins(sched, edges):
    """Each member's bins: what it or its slot is."""
    slots_of = {}
    for m in sched["members"]:
        slots_of.setdefault(m["rank"], []).append((sched["slots"][m["slot"]][1], m["slot"]))
    for m in sched["members"]:
        mine = sorted(slots_of[m["rank"]])
        position = mine.index((sched["slots"][m["slot"]][1], m["slot"])) / max(1, len(mine) - 1)
        yield m, {
            "g": str(m["g"]),
            "role": "head-tail member 0" if m["head_tail_first"] else "other",
            "tiles": bin_of(m["tiles"], edges["tiles"]),
            "tokens": bin_of(m["tokens"], edges["tokens"]),
            "kv": bin_of(m["kv"], edges["kv"]),
            "padding": "some" if m["padding"] > 0 else "none",
            "plan": m["plan"],
            "documents in slot": str(m["docs"]) if m["docs"] < 6 else "6+",
            "slots per rank": bin_of(len(mine), edges["slots"]),
            "position": "first third" if position < 1 / 3 else
                        "middle third" if position < 2 / 3 else "last third"}


def splits(steps, mode):
    """Mean held-out log(measured / predicted) per (feature, bin, scheduler)."""
    members = re_.members_of(steps.values())
    counts = [sum(1 for m in sched["members"] if m["rank"] == r)
              for step in steps.values() for sched in step.values()
              for r in {m["rank"] for m in sched["members"]}]
    edges = {t: terciles([m[t] for m in members]) for t in ("tiles", "tokens", "kv")}
    edges["slots"] = terciles(counts)
    out = {}
    for key, coef in held_out(steps, mode, ROW):
        for n, sched in steps[key].items():
            for m, bins in member_bins(sched, edges):
                e = math.log(m["seconds"] / re_.price(m, coef))
                for feature, value in bins.items():
                    out.setdefault((feature, value, n), []).append(e)
    return out


def member_gap(steps, coef=None):
    """Per (step, scheduler): the mean over two-member slots of member 0's
    log residual minus member 1's, and the slots and those where member 0
    is slower; priced by `coef`, by default the fit of every step (a
    difference within one slot, which a step's common factor cancels)."""
    if coef is None:
        coef = re_.fit_weighted(re_.members_of(steps.values()), ROW, False)
    out = {}
    for key, step in sorted(steps.items()):
        for n, sched in step.items():
            gaps = []
            for ms in rf.slot_members(sched).values():
                if len(ms) == 2:
                    a, b = sorted(ms, key=lambda m: m["member"])
                    gaps.append(math.log(a["seconds"] / re_.price(a, coef))
                                - math.log(b["seconds"] / re_.price(b, coef)))
            if gaps:
                out[(key, n)] = (statistics.fmean(gaps), len(gaps), sum(1 for x in gaps if x > 0))
    return out


def member_zero_factor(train, coef):
    """delta by least squares through 0 of (measured - predicted) on the
    predicted time of member 0 of per-document plans."""
    num = den = 0.0
    for m in re_.members_of(train):
        if m["head_tail_first"]:
            p = re_.price(m, coef)
            num += (m["seconds"] - p) * p
            den += p * p
    return num / den if den else 0.0


def wait_kind(ms, by_plan):
    """The slot's class for the slot-end wait: one class, or per-document
    head-tail plans apart from the others."""
    if not by_plan:
        return "all"
    return "per-document" if len(ms) > 1 and ms[0]["plan"].startswith("per_document") else "other"


def wait_unit(ms, price):
    """The slot's extra length per unit of j: its slowest predicted member
    times e(g'), g' its members with tokens (rank_error.py's max form)."""
    return max(price(m) for m in ms) * rf.expected_max(sum(1 for m in ms if m["tokens"] > 0))


def fit_waits(train, price, by_plan):
    """j >= 0 per class by least squares through 0 on the training steps'
    slot lengths (measured slowest member - predicted slowest member)."""
    num, den = {}, {}
    for step in train:
        for sched in step.values():
            for ms in rf.slot_members(sched).values():
                k, x = wait_kind(ms, by_plan), wait_unit(ms, price)
                r = max(m["seconds"] for m in ms) - max(price(m) for m in ms)
                num[k] = num.get(k, 0.0) + r * x
                den[k] = den.get(k, 0.0) + x * x
    return {k: max(0.0, num[k] / den[k]) if den[k] else 0.0 for k in num}


def candidate(steps, mode, terms, member_zero, wait=None):
    """Held-out per-rank errors and summed critical paths of one fit; `wait`
    None, "one" (one j) or "plan" (j per wait_kind)."""
    rank = {n: [] for n in SCHEDULERS}
    crit = {n: [0.0, 0.0] for n in SCHEDULERS}
    fitted = []
    for train_keys, test_key in re_.folds(steps, mode):
        train = [steps[k] for k in train_keys]
        coef = re_.fit_weighted(re_.members_of(train), terms, False)
        delta = member_zero_factor(train, coef) if member_zero else 0.0

        def price(m):
            return re_.price(m, coef) * (1 + delta * m["head_tail_first"])

        j = fit_waits(train, price, wait == "plan") if wait else {}
        fitted.append(f"member-0 factor {delta:+.3f}" if member_zero else
                      ", ".join(f"j {k} {v:.2f}" for k, v in sorted(j.items())) if wait else
                      ", ".join(f"{t} {coef.get(t, 0.0):.2e} s/{unit}" for t, unit in FITTED
                                if t in terms))
        for n, sched in steps[test_key].items():
            measured, predicted, rm, rp = {}, {}, {}, {}
            for m in sched["members"]:
                measured[(m["slot"], m["rank"])] = m["seconds"]
                predicted[(m["slot"], m["rank"])] = price(m)
                rm[m["rank"]] = rm.get(m["rank"], 0.0) + m["seconds"]
                rp[m["rank"]] = rp.get(m["rank"], 0.0) + price(m)
            extra = {s: j.get(wait_kind(ms, wait == "plan"), 0.0) * wait_unit(ms, price)
                     for s, ms in rf.slot_members(sched).items()}
            rank[n] += [(rm[r] - rp[r]) / rp[r] for r in rm]
            crit[n][0] += rf.critical_path(sched["slots"], measured)
            crit[n][1] += rf.critical_path(sched["slots"], predicted, extra=extra)
    return {"rank": {n: re_.median_abs(v) for n, v in rank.items()}, "critical": crit,
            "fitted": fitted}


CANDIDATES = {"today (row model)": (ROW, False, None),
              "received and sent apart": (SPLIT_EXCHANGE, False, None),
              "today + member-0 factor": (ROW, True, None),
              "today + slot-end wait, one j": (ROW, False, "one"),
              "today + slot-end wait, j per plan kind": (ROW, False, "plan"),
              "full and partial tiles apart": (SPLIT_TILES, False, None),
              "full and partial tiles apart + pieces": (SPLIT_TILES + ["pieces"], False, None),
              "kernel chunks and masked chunks": (ROW + ["chunks", "masked"], False, None),
              "query-block visits": (ROW + ["visits"], False, None),
              "full and partial tiles apart + visits": (SPLIT_TILES + ["visits"], False, None),
              "full and partial tiles apart + multi": (SPLIT_TILES + ["multi"], False, None),
              "row + multi": (ROW + ["multi"], False, None),
              "full and partial tiles apart + multi + visits":
                  (SPLIT_TILES + ["multi", "visits"], False, None)}


def gains(crit):
    out = []
    for base in ("fixed", "megatron_dcp"):
        m = crit[base][0] / crit["hybrid"][0]
        p = crit[base][1] / crit["hybrid"][1]
        out.append((base, m, p))
    return out


def report(name, steps, modes):
    print(f"\n== {name}: {len(steps)} measured steps")
    members = re_.members_of(steps.values())
    unsplit = sum(1 for m in members if not m.get("split", True))
    print(f"  tiles split from the plans' positions for {len(members) - unsplit} of "
          f"{len(members)} member records; {unsplit} (weighted plans, other masks) counted "
          "as all partial, one masked chunk per chunk of tiles")
    for mode in modes:
        cells = [f"{n} members {v['members']:.3f}, slots {v['slots']:.3f}, critical path "
                 f"{v['critical']:.3f}" for n, v in layers(steps, mode).items()]
        print(f"  {mode} measured / predicted: " + "; ".join(cells))
        spread = slot_spread(steps, mode)
        print(f"  {mode} slowest member / mean, measured against predicted (median over "
              "slots): " + "; ".join(f"{n} g={g} {a:.3f} vs {b:.3f} ({c})"
                                     for (n, g), (a, b, c) in sorted(spread.items())))
        table = splits(steps, mode)
        for feature in ("role", "g", "tiles", "tokens", "kv", "padding", "plan",
                        "documents in slot", "slots per rank", "position"):
            cells = [f"{value} {n} {100 * statistics.fmean(v):+.1f}% ({len(v)})"
                     for (f, value, n), v in sorted(table.items()) if f == feature]
            print(f"  {mode} mean log(measured / predicted) by {feature}: " + "; ".join(cells))
        for label, (terms, zero, wait) in CANDIDATES.items():
            res = candidate(steps, mode, terms, zero, wait)
            g = "; ".join(f"over {b} {m:.3f}x vs {p:.3f}x ({100 * (m - p):+.1f})"
                          for b, m, p in gains(res["critical"]))
            print(f"  {mode} {label}: per-rank median |e| "
                  + ", ".join(f"{n} {100 * v:.1f}%" for n, v in res["rank"].items())
                  + f"; {g}" + (f"; fitted per fold: {'; '.join(res['fitted'])}"
                                if any(res["fitted"]) else ""))
    gaps = member_gap(steps)
    print("  member 0 over member 1 of two-member slots (mean log residual, slots, member 0 "
          "slower in): " + "; ".join(f"step {k[1]} {n} {100 * a:+.1f}% ({c}, {p})"
                                     for (k, n), (a, c, p) in sorted(gaps.items())))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", help="hybrid_train.py --out folders")
    parser.add_argument("--fulcrum", default="build/release/bin/fulcrum")
    parser.add_argument("--first-step", type=int, default=2)
    parser.add_argument("--modes", default="fwd2,loo")
    parser.add_argument("--kernel", choices=["full-apart", "whole-chunks"], default="full-apart",
                        help="the kernel's masking the jobs ran, for its chunk counts: full-apart "
                        "(the runtime's since 2026-11-27 14:37 UTC) or whole-chunks (before)")
    args = parser.parse_args()
    if not os.path.isfile(args.fulcrum):
        sys.exit(f"no fulcrum CLI at {args.fulcrum}; build it or pass --fulcrum PATH")
    for folder in args.folders:
        report(folder, attach(folder, args.fulcrum, args.first_step, args.kernel == "full-apart"),
               args.modes.split(","))
        prices = refit_prices(folder)
        if prices:
            print("  refitted partial tile / full tile, (a + e) / a, after step: " +
                  ", ".join(f"{step} {ratio:.2f}" for step, ratio in prices))


if __name__ == "__main__":
    rf.run_main(main, "slot_bias.py")
