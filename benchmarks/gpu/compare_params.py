#!/usr/bin/env python3
"""Largest difference between two `fulcrum train --save-params` files (a line
"name count" per parameter, a blank line, then every value as float64), per
parameter and overall, with the largest magnitude beside it. Exit 2 on files
that are not such, or that hold different parameters.
Usage: python3 benchmarks/gpu/compare_params.py A.bin B.bin"""

import struct
import sys


def read_params(path):
    with open(path, "rb") as f:
        data = f.read()
    end = data.find(b"\n\n")
    if end < 0:
        raise ValueError(f"{path}: no blank line after the parameter list; is it a "
                         "--save-params file?")
    names = []
    for line in data[:end].decode().splitlines():
        name, count = line.rsplit(" ", 1)
        names.append((name, int(count)))
    values = data[end + 2:]
    total = sum(count for _, count in names)
    if len(values) != 8 * total:
        raise ValueError(f"{path}: {len(values)} bytes of values for {total} parameters "
                         f"({8 * total} expected)")
    out, offset = {}, 0
    for name, count in names:
        out[name] = struct.unpack_from(f"<{count}d", values, offset)
        offset += 8 * count
    return out


def main(argv):
    if len(argv) != 2:
        print("compare_params: give two --save-params files", file=sys.stderr)
        return 2
    try:
        a, b = read_params(argv[0]), read_params(argv[1])
    except (OSError, ValueError) as error:
        print(f"compare_params: {error}", file=sys.stderr)
        return 2
    if [(k, len(v)) for k, v in a.items()] != [(k, len(v)) for k, v in b.items()]:
        print(f"compare_params: {argv[0]} and {argv[1]} hold different parameters",
              file=sys.stderr)
        return 2
    worst, scale = 0.0, 0.0
    for name in a:
        diff = max((abs(x - y) for x, y in zip(a[name], b[name])), default=0.0)
        worst = max(worst, diff)
        scale = max(scale, max((abs(x) for x in a[name]), default=0.0))
    print(f"parameters: {len(a)} tensors, {sum(len(v) for v in a.values())} values; "
          f"largest |difference| {worst:.3e}; largest |value| {scale:.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
