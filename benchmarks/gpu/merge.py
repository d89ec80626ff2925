#!/usr/bin/env python3
"""Tables and the fitted profile from several runs of benchmarks/gpu/run.py
together: one GPU command may run 10 minutes, so a full sweep is split over
runs (BENCH_ARGS="--rows ..."), each with its own --out. Runs must share the
device, heads, head dim and block size.
Usage: python3 benchmarks/gpu/merge.py --out DIR RUN_DIR [RUN_DIR ...]"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpubench import report  # noqa: E402


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("runs", nargs="+", help="--out directories of run.py")
    args = p.parse_args(argv)
    paths = [os.path.join(run, "records.jsonl") for run in args.runs]
    missing = [path for path in paths if not os.path.isfile(path)]
    if missing:
        print(f"merge: {missing[0]} does not exist; give run.py --out directories",
              file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    try:
        report.write_outputs(args.out, paths, [])
    except ValueError as error:
        print(f"merge: {error}", file=sys.stderr)
        return 2
    print(f"wrote {os.path.join(args.out, 'summary.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
