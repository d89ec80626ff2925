#!/usr/bin/env python3
"""Writes the kept seed corpora of fuzz/corpus/<target>/.

The byte-level targets (planner, plugin_abi, idx) decode their input with
fuzz_input.h; this file encodes named, meaningful starting points in the same
order, so that every run begins from workloads and requests a person would
recognise instead of from noise. Rerun it after changing a decoder:

    python3 fuzz/make_seeds.py

The config target's seeds are YAML text and live as plain files.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


class Writer:
    """Mirror of FuzzInput: each method emits what the decoder reads."""

    def __init__(self):
        self.out = bytearray()

    def u8(self, v):
        self.out += bytes([v & 0xFF])
        return self

    def u16(self, v):
        self.out += struct.pack("<H", v & 0xFFFF)
        return self

    def u32(self, v):
        self.out += struct.pack("<I", v & 0xFFFFFFFF)
        return self

    def range(self, lo, hi, v):
        """FuzzInput::range(lo, hi) returning v."""
        span = hi - lo
        raw = v - lo
        if span < 0x100:
            return self.u8(raw)
        if span < 0x10000:
            return self.u16(raw)
        if span < 0x100000000:
            return self.u32(raw)
        self.out += struct.pack("<Q", raw)
        return self

    def small(self, lo, hi, v):
        """FuzzInput::nasty_int64 taking its ordinary (small) branch."""
        self.u8(0)
        return self.range(lo, hi, v)

    def string(self, s):
        self.u8(len(s))
        self.out += s.encode()
        return self


MASKS = {"causal": 0, "full": 1, "sliding": 2, "prefix": 3, "block_sparse": 4}


def workload(w, p, n, block, docs=(), mask="causal", param=None, sparse_rows=None):
    """plausible_workload(): P, N (as bits + offset), B, documents, mask."""
    w.range(1, 64, p)
    bits = max(n - 1, 0).bit_length()
    w.u8(bits)
    w.range(1 << bits >> 1, 1 << bits, n)
    if block <= 256 and block & (block - 1) == 0:
        w.u8(block.bit_length() - 1)  # < 0x80: B = 1 << (byte % 9)
    else:
        # >= 0x80: B = 1 + byte % 200.
        byte = block - 1 if block - 1 >= 0x80 else block - 1 + 200
        assert 0x80 <= byte <= 0xFF, "B must be a power of two up to 256 or 1 + (56..199)"
        w.u8(byte)
    w.u8(len(docs))
    # Documents are cut points: the decoder sorts and deduplicates them.
    at = 0
    for length in docs[:-1]:
        at += length
        w.range(1, n - 1, at)
    w.u8(MASKS[mask])
    if mask == "sliding":
        w.range(1, n + 2, param)
    elif mask == "prefix":
        w.range(0, n + 2, param)
    elif mask == "block_sparse":
        for shape in sparse_rows:
            w.u8(shape)
    return w


STRATEGIES = ["contiguous", "head_tail", "striped", "per_document_padded", "per_document",
              "ptrr", "balanced", "auto"]


def planner_seeds():
    def seed(strategy, **kw):
        w = Writer()
        w.range(0, len(STRATEGIES), STRATEGIES.index(strategy))
        w.u8(0)  # not corrupted
        return bytes(workload(w, **kw).out)

    return {
        "balanced_causal_packed": seed("balanced", p=4, n=4096, block=64,
                                       docs=(1000, 96, 2000, 1000)),
        "auto_sliding_packed": seed("auto", p=8, n=2048, block=128, docs=(512, 1024, 512),
                                    mask="sliding", param=300),
        "head_tail_single_doc": seed("head_tail", p=2, n=1024, block=16),
        "ptrr_full": seed("ptrr", p=4, n=1024, block=32, mask="full"),
        "per_document_prefix": seed("per_document", p=3, n=999, block=16, docs=(1, 500, 498),
                                    mask="prefix", param=100),
        "per_document_padded_short_docs": seed("per_document_padded", p=8, n=40, block=4,
                                               docs=(1, 2, 3, 34)),
        "striped_block_sparse": seed("striped", p=4, n=512, block=64, mask="block_sparse",
                                     sparse_rows=[1, 2, 3, 0, 1, 6, 10, 1]),
        "contiguous_fewer_tokens_than_ranks": seed("contiguous", p=16, n=5, block=1),
    }


def plugin_abi_seeds():
    def plan_call(w, strategy_index, **kw):
        w.u8(2)  # plan_cp
        workload(w, **kw)
        w.u8(0)  # not corrupted
        w.u8(0)  # struct_size as built
        w.u8(0)  # reserved0 zero
        w.u8(2)  # documents as generated
        if not kw.get("docs"):
            w.u8(0)  # no stray document pointer
        if kw.get("mask") == "block_sparse":
            w.u8(0)  # offsets present
            w.u8(0)  # last offset as built
        w.u8(strategy_index)
        w.u8(0)  # plan struct_size as built
        return w

    def dp_call(w, strategy_index, lengths, ranks, cost_kind=0, equal=0, coefficient=2):
        w.u8(1)  # partition_dp
        w.u8(0)  # struct_size as built
        w.small(1, 64, ranks)
        w.small(0, 1, cost_kind)
        w.u8(equal)
        w.u8(coefficient)  # 24576.0
        w.u8(2)  # an array of lengths
        w.range(1, 256, len(lengths))
        for length in lengths:
            w.range(1, 1 << 17, length)
        w.u8(strategy_index)
        w.u8(0)  # result struct_size as built
        w.u8(0)  # offsets buffer
        w.u8(0)  # samples buffer
        return w

    def schedule_call(w, strategy_index, world, tokens_per_rank, lengths, mask="causal",
                      param=0, block=64, cp=0):
        w.u8(4)  # schedule
        w.u8(0)  # struct_size as built
        w.small(1, 16, world)
        w.small(1, 4096, tokens_per_rank)
        w.small(0, 4, MASKS[mask])
        w.small(0, 512, param)
        w.small(1, 256, block)
        w.small(0, 4, cp)
        w.u8(0)  # a profile name
        w.u8(0)  # the bundled coefficients
        w.u8(2)  # an array of lengths
        w.range(1, 64, len(lengths))
        for length in lengths:
            w.range(1, 1 << 12, length)
        w.u8(strategy_index)
        w.u8(0)  # answer struct_size as built
        return w

    def seed(*calls):
        w = Writer()
        w.u8(1)  # log through the host
        w.u8(len(calls) - 1)
        for call in calls:
            call(w)
        return bytes(w.out)

    return {
        "plan_balanced_packed": seed(lambda w: plan_call(w, 6, p=4, n=2048, block=64,
                                                         docs=(700, 1348))),
        "plan_auto_then_dp_auto": seed(
            lambda w: plan_call(w, 7, p=8, n=1024, block=128, mask="sliding", param=100),
            lambda w: dp_call(w, 3, [500, 20, 3000, 77, 1024, 8], ranks=3)),
        "plan_block_sparse_ptrr": seed(lambda w: plan_call(w, 5, p=2, n=256, block=32,
                                                           mask="block_sparse",
                                                           sparse_rows=[1] * 8)),
        "dp_karmarkar_karp_equal_count_attention": seed(
            lambda w: dp_call(w, 2, [4096, 100, 100, 2048, 512, 512, 7, 9000], ranks=4,
                              cost_kind=1, equal=1)),
        "dp_lpt_more_ranks_than_samples": seed(lambda w: dp_call(w, 1, [5, 6], ranks=7)),
        "plan_head_tail_inapplicable": seed(
            lambda w: plan_call(w, 1, p=3, n=100, block=8)),
        # Schedulers in the table's order: fixed, megatron_dcp, hybrid.
        "schedule_hybrid_packed": seed(lambda w: schedule_call(
            w, 2, world=8, tokens_per_rank=512, lengths=[3000, 40, 700, 96, 1200, 8, 300, 2048])),
        "schedule_fixed_cp2_cut": seed(lambda w: schedule_call(
            w, 0, world=4, tokens_per_rank=256, lengths=[4000, 100, 900], cp=2)),
        "schedule_megatron_sliding_then_dp": seed(
            lambda w: schedule_call(w, 1, world=6, tokens_per_rank=1000,
                                    lengths=[2500, 1800, 900, 700, 400], mask="sliding",
                                    param=128),
            lambda w: dp_call(w, 3, [500, 20, 3000], ranks=2)),
    }


MAGIC = b"MMIDIDX\x00\x00"
DTYPES = {"uint8": (1, "B"), "int8": (2, "b"), "int16": (3, "h"), "int32": (4, "i"),
          "int64": (5, "q"), "float64": (6, "d"), "float32": (7, "f"), "uint16": (8, "H")}
# bin_bytes() patterns of idx_fuzz.cpp.
PATTERN_ZEROS, PATTERN_RAMP, PATTERN_FLOAT32_3, PATTERN_FLOAT64_M2 = 0, 1, 2, 3


def idx_seed(bin_size, pattern, dtype, sizes, pointers=None, doc_idx=None):
    code, fmt = DTYPES[dtype]
    item = struct.calcsize(fmt)
    if pointers is None:
        pointers, at = [], 0
        for s in sizes:
            pointers.append(at)
            at += s * item
    if doc_idx is None:
        doc_idx = [0, len(sizes)]
    idx = MAGIC + struct.pack("<QBQQ", 1, code, len(sizes), len(doc_idx))
    idx += struct.pack("<%di" % len(sizes), *sizes)
    idx += struct.pack("<%dq" % len(pointers), *pointers)
    idx += struct.pack("<%dq" % len(doc_idx), *doc_idx)
    return struct.pack("<HB", bin_size, pattern) + idx


def idx_seeds():
    return {
        "int32_three_sequences": idx_seed(64, PATTERN_RAMP, "int32", [3, 5, 8]),
        "uint16_documents": idx_seed(40, PATTERN_RAMP, "uint16", [4, 4, 12],
                                     doc_idx=[0, 1, 3]),
        "float32_whole_numbers": idx_seed(32, PATTERN_FLOAT32_3, "float32", [2, 6]),
        "float64_negative_whole": idx_seed(64, PATTERN_FLOAT64_M2, "float64", [8]),
        "uint8_empty_sequence": idx_seed(8, PATTERN_RAMP, "uint8", [0, 8]),
        "int64_no_sequences": idx_seed(0, PATTERN_ZEROS, "int64", [], doc_idx=[0]),
        "truncated_header": struct.pack("<HB", 16, PATTERN_ZEROS) + MAGIC + b"\x01\x00",
    }


def write(target, seeds):
    directory = os.path.join(HERE, "corpus", target)
    os.makedirs(directory, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    write("planner", planner_seeds())
    write("plugin_abi", plugin_abi_seeds())
    write("idx", idx_seeds())
