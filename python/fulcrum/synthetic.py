"""Seeded synthetic rows of packed documents, drawn as the C++ CLI's
--synthetic-docs draws them, so that a seed means the same row in both."""

import math



class _Mt19937_64:
    """The 64-bit Mersenne Twister (std::mt19937_64): the engine the C++
    side draws its synthetic documents from, so a seed means the same
    lengths in both."""

    _N, _M, _MASK = 312, 156, (1 << 64) - 1

    def __init__(self, seed):
        self._mt = [seed & self._MASK]
        for i in range(1, self._N):
            prev = self._mt[-1]
            self._mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & self._MASK)
        self._index = self._N

    def _twist(self):
        mt, n, m = self._mt, self._N, self._M
        for i in range(n):
            y = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % n] & 0x7FFFFFFF)
            mt[i] = mt[(i + m) % n] ^ (y >> 1) ^ (0xB5026F5AA96619E9 if y & 1 else 0)
        self._index = 0

    def __call__(self):
        if self._index >= self._N:
            self._twist()
        y = self._mt[self._index]
        self._index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & self._MASK


def _round_half_away(x):
    whole = math.floor(x)
    return whole + 1 if x - whole >= 0.5 else whole


def synthetic_document_lengths(count, seed, max_length=1 << 20):
    """core/synthetic.cpp's mix, draw for draw: 60% short web-like documents
    (log-normal around 500 tokens), 36% mid-length (around 3000) and a 4%
    log-uniform tail from 16K to ``max_length``."""
    rng = _Mt19937_64(seed)

    def uniform01():
        return (rng() >> 11) * (1.0 / 9007199254740992.0)

    def standard_normal():
        u1 = 1.0 - uniform01()
        u2 = uniform01()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)

    cap = float(max(max_length, 1))
    tail_lo = min(16384.0, cap)
    lengths = []
    for _ in range(max(count, 0)):
        pick = uniform01()
        if pick < 0.60:
            length = math.exp(math.log(500.0) + 1.0 * standard_normal())
        elif pick < 0.96:
            length = math.exp(math.log(3000.0) + 0.8 * standard_normal())
        else:
            length = math.exp(math.log(tail_lo) + uniform01() * (math.log(cap) - math.log(tail_lo)))
        lengths.append(int(min(max(_round_half_away(length), 1.0), cap)))
    return lengths


def synthetic_packed_row(tokens, seed):
    """The row of ``fulcrum plan --seq-len N --synthetic-docs SEED``: the
    synthetic mix packed in order from document ``seed % count``, the last
    one cut to fill the row exactly."""
    docs = synthetic_document_lengths(tokens // 1000 + 64, seed)
    row, room, at = [], tokens, seed % len(docs)
    while room > 0:
        length = min(docs[at], room)
        row.append(length)
        room -= length
        at = (at + 1) % len(docs)
    return row


def random_docs(tokens, seed):
    """A seeded packed row; the same as synthetic_packed_row, the C++ CLI's
    --synthetic-docs (kept under its earlier name)."""
    return synthetic_packed_row(tokens, seed)
