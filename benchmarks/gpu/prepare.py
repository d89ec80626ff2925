#!/usr/bin/env python3
"""Writes the benchmark's rows into benchmarks/gpu/.data/rows.json (ignored by
git) so that they travel with the checkout to a machine without
../shared/workloads. Packed rows are drawn from ../shared/workloads when it
is present and are synthetic otherwise (the file says which).
Usage: python3 benchmarks/gpu/prepare.py [--force]"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpubench import rows  # noqa: E402


def main(argv):
    force = "--force" in argv
    unknown = [a for a in argv if a != "--force"]
    if unknown:
        print(f"prepare: unknown argument {unknown[0]!r}; the only option is --force",
              file=sys.stderr)
        return 2
    if os.path.exists(rows.ROWS_FILE) and not force:
        print(f"prepare: {rows.ROWS_FILE} exists; pass --force to draw the rows again",
              file=sys.stderr)
        return 2
    built = rows.build_rows()
    rows.save_rows(built)
    for row in built:
        print(f"{row.name}: {row.tokens} tokens, {len(row.doc_lengths)} documents "
              f"(longest {max(row.doc_lengths)}), from {row.source}")
    print(f"wrote {rows.ROWS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
