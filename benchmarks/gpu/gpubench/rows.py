"""The rows the GPU benchmark plans and times.

Packed rows come from the document-length distributions in
../shared/workloads (relative to the repository root): the documents are
shuffled with a fixed seed and packed in order into rows of the target length,
a document longer than the room left continuing in the next row; of the first
64 rows, ranked by attention work, the median row and the one at the 90th
percentile are kept: a typical row, and one where the mixes' few long
documents make balancing hard. Single
causal rows are one document each, one length divisible by every 2P and by
P x B, one odd (PyTorch's head-tail and PTRR cannot shard it).

The GPU machine has no ../shared, so `prepare` writes the chosen rows into
benchmarks/gpu/.data/rows.json (ignored by git), which travels with the
checkout. Without either, seeded synthetic rows stand in and every table says
so.
"""

import json
import os
from dataclasses import dataclass, field

import numpy as np

PACKED_SOURCES = ("dist_wlbllm", "dist_prolong")
PACKED_LENGTHS = (32768, 65536, 131072)
SINGLE_LENGTHS = (65536, 98305)
SHUFFLE_SEED = 13
ROW_CANDIDATES = 64
ROW_PERCENTILES = (50, 90)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
DATA_DIR = os.path.join(REPO_ROOT, "benchmarks", "gpu", ".data")
ROWS_FILE = os.path.join(DATA_DIR, "rows.json")


@dataclass
class Row:
    name: str
    doc_lengths: list
    source: str
    kind: str = "packed"  # packed | single
    notes: list = field(default_factory=list)

    @property
    def tokens(self):
        return int(sum(self.doc_lengths))


def workload_dir(repo_root=REPO_ROOT):
    """../shared/workloads from the repository root, or None."""
    candidate = os.path.normpath(os.path.join(repo_root, "..", "shared", "workloads"))
    return candidate if os.path.isdir(candidate) else None


def pack_rows(lengths, row_tokens, count, seed=SHUFFLE_SEED):
    """The first `count` full rows of `row_tokens` tokens packed from `lengths`
    in a seeded shuffled order; a document that does not fit the room left is
    cut there and continues in the next row."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size == 0 or (lengths < 1).any():
        raise ValueError("document lengths must be a non-empty list of positive integers")
    order = np.random.default_rng(seed).permutation(lengths.size)
    packed, row, room = [], [], int(row_tokens)
    for index in order:
        left = int(lengths[index])
        while left:
            take = min(left, room)
            row.append(take)
            left -= take
            room -= take
            if room == 0:
                packed.append(row)
                if len(packed) == count:
                    return packed
                row, room = [], int(row_tokens)
    if not packed:
        raise ValueError(f"the workload holds {int(lengths.sum())} tokens, fewer than one row "
                         f"of {row_tokens}")
    return packed


def pack_first_row(lengths, row_tokens, seed=SHUFFLE_SEED):
    return pack_rows(lengths, row_tokens, 1, seed)[0]


def rows_at_work_percentiles(lengths, row_tokens, percentiles=ROW_PERCENTILES,
                             candidates=ROW_CANDIDATES, seed=SHUFFLE_SEED):
    """Of the first `candidates` packed rows, ranked by attention work (sum of
    squared document lengths), the rows at these percentiles: a typical row
    and one where the mix's few long documents make balancing hard."""
    packed = sorted(pack_rows(lengths, row_tokens, candidates, seed),
                    key=lambda row: sum(x * x for x in row))
    return [packed[min(len(packed) - 1, int(p / 100 * len(packed)))] for p in percentiles]


def synthetic_lengths(seed, count=20000):
    """A long-tailed mix like the long-context training sets: mostly short
    documents, a few that fill much of a row."""
    rng = np.random.default_rng(seed)
    body = rng.lognormal(mean=7.3, sigma=1.1, size=count)
    tail = rng.random(count) < 0.01
    body[tail] = rng.uniform(20000, 120000, size=int(tail.sum()))
    return np.maximum(1, body.astype(np.int64)).tolist()


def single_rows():
    return [Row(name=f"single_causal_{n}", doc_lengths=[n], source="one document",
                kind="single") for n in SINGLE_LENGTHS]


def build_rows(repo_root=REPO_ROOT, packed_lengths=PACKED_LENGTHS):
    """Packed rows from ../shared/workloads when present (synthetic otherwise)
    plus the single causal rows."""
    rows = []
    directory = workload_dir(repo_root)
    for source in PACKED_SOURCES:
        if directory and os.path.isfile(os.path.join(directory, source + ".json")):
            with open(os.path.join(directory, source + ".json")) as f:
                lengths = json.load(f)
            origin = (f"../shared/workloads/{source}.json, shuffle seed {SHUFFLE_SEED}, "
                      f"of the first {ROW_CANDIDATES} rows by attention work")
            label = source.replace("dist_", "")
        else:
            lengths = synthetic_lengths(len(rows) + 1)
            origin = "synthetic long-tailed mix (../shared/workloads not found)"
            label = f"synthetic{PACKED_SOURCES.index(source) + 1}"
        for n in packed_lengths:
            chosen = rows_at_work_percentiles(lengths, n)
            for percentile, doc_lengths in zip(ROW_PERCENTILES, chosen):
                rows.append(Row(name=f"{label}_{n // 1024}k_p{percentile}",
                                doc_lengths=doc_lengths,
                                source=f"{origin}, row at percentile {percentile}"))
    return rows + single_rows()


def save_rows(rows, path=ROWS_FILE):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump([row.__dict__ for row in rows], f)
    os.replace(tmp, path)


def load_rows(path=ROWS_FILE, repo_root=REPO_ROOT):
    """(rows, where they came from): the prepared file, else built now."""
    if os.path.isfile(path):
        with open(path) as f:
            return [Row(**entry) for entry in json.load(f)], f"prepared rows in {path}"
    rows = build_rows(repo_root)
    where = ("../shared/workloads" if workload_dir(repo_root)
             else "synthetic rows: ../shared/workloads not found and no prepared rows")
    return rows, where
