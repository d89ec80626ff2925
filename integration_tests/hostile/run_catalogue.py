#!/usr/bin/env python3
"""Runs the hostile-input catalogue (cases.tsv) against a fulcrum build.

Each case runs in a scratch directory $W with the fixtures of fixtures.sh; its
setup (output discarded) builds the hostile input, its command runs fulcrum
through $F (the CLI, possibly under a wrapper such as valgrind) or $WORKER.
Outcomes:
  error  exit status 2, exactly one line on stderr saying what to do ('; '),
         no signal, within the deadline
  ok     exit status 0, no signal, within the deadline (a correct run)
  warn   exit status 0 with a warning on stderr (an absent plugin)
  worker-error  bad input only a worker can see (a checkpoint --resume auto
         finds): exit 2, the rank's line saying what to do, the launcher's line
  write-error  a write failed mid-run (injected: a file size limit): exit 1 or
         2, the rank's line saying 'cannot write' and the file, at most the
         launcher's line besides; the command checks the previous file is kept
  fails:TEXT  a run that fails while training (a NaN loss): exit 1 or 2, a
         line holding TEXT, at most the launcher's line besides
  xfail  a known defect: breaks the error rule today; reported, not failed,
         and failed once it holds so that the mark is removed
Prints one line per failing case and a summary by surface and class; exits 1
when any case fails.
"""
import argparse
import collections
import concurrent.futures
import csv
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CRASH = re.compile(r"terminate called|what\(\)|Segmentation|Bus error|AddressSanitizer|"
                   r"runtime error:|Aborted|core dumped|Traceback")


def load_cases(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f, delimiter="\t") if r and not r[0].startswith("#")]
    header, rows = rows[0], rows[1:]
    return [dict(zip(header, r)) for r in rows]


def starts_workers(case):
    """Whether a case runs fulcrum-worker: a train run expected to get past
    the CLI's checks, a worker started directly, or a job started by setup."""
    train = "train" in case["command"]
    past_cli = case["expect"] not in ("error", "xfail")
    return (train and past_cli) or "WORKER" in case["command"] or "$F train" in case["setup"]


def run_case(case, env, deadline):
    with tempfile.TemporaryDirectory(prefix="fulcrum_hostile_") as work:
        env = dict(env, W=work)
        prelude = f"source {shlex.quote(os.path.join(HERE, 'fixtures.sh'))}; cd \"$W\"; "
        setup = subprocess.Popen(["bash", "-c", prelude + case["setup"]], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)
        try:
            setup.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(setup.pid, signal.SIGKILL)
            return "setup timed out", 0.0, "", -1
        start = time.monotonic()
        proc = subprocess.Popen(["bash", "-c", prelude + "exec " + case["command"]], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=deadline)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            timed_out = True
        elapsed = time.monotonic() - start
        # Whatever setup left running (a port holder) ends with its case.
        try:
            os.killpg(setup.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        err = err.decode(errors="replace")
        rc = proc.returncode
        if timed_out:
            return f"no answer within {deadline} s", elapsed, err, rc
        if rc < 0:
            return f"killed by signal {signal.Signals(-rc).name}", elapsed, err, rc
        if CRASH.search(err):
            return "stderr looks like a crash", elapsed, err, rc
        lines = [l for l in err.splitlines() if l.strip()]
        expect = case["expect"]
        if expect == "xfail":
            expect = "error"
        if expect == "error":
            if rc != 2:
                return f"exit status {rc}, expected 2", elapsed, err, rc
            if len(lines) != 1:
                return f"{len(lines)} lines on stderr, expected 1", elapsed, err, rc
            if "; " not in lines[0]:
                return "the line does not say what to do ('; ...')", elapsed, err, rc
        elif expect == "worker-error" or expect.startswith("worker-error:"):
            # What only a worker can see (the checkpoints --resume auto finds):
            # exit 2, the rank's line saying what to do, the launcher's line;
            # "worker-error:TEXT": the rank's line says TEXT (the cause the
            # case plants, not another one it trips over first).
            if rc != 2:
                return f"exit status {rc}, expected 2", elapsed, err, rc
            if len(lines) != 2 or not lines[0].startswith("[rank ") or "; " not in lines[0]:
                return "expected the rank's line and the launcher's", elapsed, err, rc
            wanted = expect[len("worker-error:"):]
            if wanted and wanted not in lines[0]:
                return f"the rank's line does not say '{wanted}'", elapsed, err, rc
        elif expect == "write-error":
            # A write that failed while workers ran: the rank's line naming
            # the file and the cause, then the launcher's line naming the rank.
            if rc not in (1, 2):
                return f"exit status {rc}, expected 1 or 2", elapsed, err, rc
            if not any("cannot write" in l for l in lines) or len(lines) > 2:
                return "no single line naming the failed write", elapsed, err, rc
        elif expect.startswith("fails:"):
            # A run that fails while training, for a cause it must name.
            wanted = expect[len("fails:"):]
            # A test-only fault announces itself on purpose; that warning is
            # not one of the failure's lines.
            lines = [l for l in lines if "warning: test-only" not in l]
            if rc not in (1, 2):
                return f"exit status {rc}, expected 1 or 2", elapsed, err, rc
            if not any(wanted in l for l in lines) or len(lines) > 2:
                return f"no single line saying '{wanted}'", elapsed, err, rc
        elif expect in ("ok", "warn"):
            if rc != 0:
                return f"exit status {rc}, expected 0", elapsed, err, rc
            if expect == "warn" and "warning" not in err:
                return "no warning on stderr", elapsed, err, rc
        else:
            return f"unknown expectation {expect!r}", elapsed, err, rc
        return None, elapsed, err, rc


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fulcrum", required=True)
    parser.add_argument("--cases", default=os.path.join(HERE, "cases.tsv"))
    parser.add_argument("--wrap", default="", help="command prefix for the CLI, e.g. valgrind")
    parser.add_argument("--deadline", type=float, default=20.0)
    parser.add_argument("--match", default="", help="only cases whose surface/class/case match")
    parser.add_argument("--skip-train", action="store_true",
                        help="leave out every fulcrum train case (a build without LibTorch)")
    parser.add_argument("--no-workers", action="store_true",
                        help="leave out the cases that start workers (sanitizer and valgrind "
                        "runs of the CLI): what remains ends in the CLI")
    parser.add_argument("--one-per-pair", action="store_true",
                        help="only the first case of each surface and class")
    parser.add_argument("--table", action="store_true", help="print counts by surface and class")
    parser.add_argument("--jobs", type=int, default=1,
                        help="cases run at once (each in its own scratch directory); keep 1 "
                        "where cases start workers, whose stalls and timeouts are timed")
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: must be at least 1")

    fulcrum = os.path.abspath(args.fulcrum)
    bin_dir = os.path.dirname(fulcrum)
    env = dict(os.environ)
    env.update({
        "F": (args.wrap + " " if args.wrap else "") + fulcrum,
        "WORKER": os.path.join(bin_dir, "fulcrum-worker"),
        "PLUGIN": os.path.normpath(os.path.join(bin_dir, "..", "lib", "fulcrum",
                                                "libfulcrum_balancer.so")),
        # The broken-plugin fixtures (plugin/tests/broken), libfulcrum_broken_<kind>.so.
        "BROKEN": os.path.normpath(os.path.join(bin_dir, "..", "test_plugins")),
    })
    cases = load_cases(args.cases)
    if args.match:
        pattern = re.compile(args.match)
        cases = [c for c in cases if pattern.search(f"{c['surface']}/{c['class']}/{c['case']}")]
    if args.skip_train:
        cases = [c for c in cases if "train" not in c["command"] and "WORKER" not in c["command"]]
    if args.no_workers:
        cases = [c for c in cases if not starts_workers(c)]
    if args.one_per_pair:
        seen = set()
        kept = []
        for c in cases:
            if (c["surface"], c["class"]) not in seen:
                seen.add((c["surface"], c["class"]))
                kept.append(c)
        cases = kept
    failures = 0
    known = 0
    slowest = (0.0, "")
    slowest_refusal = (0.0, "")
    by_surface = collections.Counter()
    by_class = collections.Counter()
    outcomes = collections.Counter()
    # Cases are independent (each its own scratch directory); the report
    # follows the catalogue's order whatever order they finish in.
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = pool.map(lambda c: run_case(c, env, args.deadline), cases)
        for case, (problem, elapsed, err, rc) in zip(cases, results):
            name = f"{case['surface']} / {case['class']} / {case['case']}"
            by_surface[case["surface"]] += 1
            by_class[case["class"]] += 1
            outcomes[case["expect"].split(":")[0]] += 1
            if elapsed > slowest[0]:
                slowest = (elapsed, name)
            if case["expect"] == "error" and elapsed > slowest_refusal[0]:
                slowest_refusal = (elapsed, name)
            if case["expect"] == "xfail":
                if problem:
                    known += 1
                    print(f"KNOWN {name}: {problem}", flush=True)
                    continue
                problem = "holds now: remove its xfail mark"
            if problem:
                failures += 1
                first = err.strip().splitlines()[:3]
                print(f"FAIL {name}: {problem} ({elapsed:.2f} s)\n  command: {case['command']}\n"
                      + "".join(f"  stderr: {l}\n" for l in first), end="", flush=True)
    if args.table:
        print("by surface:")
        for k, v in sorted(by_surface.items()):
            print(f"  {v:4d}  {k}")
        print("by class:")
        for k, v in sorted(by_class.items()):
            print(f"  {v:4d}  {k}")
    print(f"{len(cases)} cases ({', '.join(f'{v} {k}' for k, v in sorted(outcomes.items()))}); "
          f"{len(cases) - failures - known} held, {known} known defects, {failures} failed; slowest {slowest[0]:.2f} s "
          f"({slowest[1]}); slowest refusal {slowest_refusal[0]:.2f} s ({slowest_refusal[1]})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
