#!/usr/bin/env python3
"""Does every translation unit that includes LibTorch compile against
another LibTorch's headers? Takes this build's compile commands (those that
name Debian's LibTorch include folder), puts INCLUDE (a PyTorch wheel's
torch/include, copied from the machine that has it) and, where given, GLOO
(a folder holding gloo/ and its config.h: wheels ship c10d's
ProcessGroupGloo.hpp but not the gloo headers it includes) ahead of it, and
compiles each with -fsyntax-only, nothing written. A header that INCLUDE
lacks would still be found in Debian's folder and hide a difference, so
each unit's dependencies are read back and any header of Debian's
LibTorch among them is a failure too.

    python3 benchmarks/gpu/check_torch_headers.py --include /tmp/t211/include \\
        --gloo /tmp/gloo_inc [--match REGEX] [--jobs 2] [--define FULCRUM_WITH_NCCL=1]

Prints one line per unit (OK or FAIL with its first errors) and a count.
Exit 0 when all compile, 1 when one does not, 2 on bad input
(docs/RESULTS_GPU.md, section 2).
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

DEBIAN_API = "/usr/include/torch/csrc/api/include"
DEBIAN_TORCH = re.compile(r"^/usr/include/(ATen|c10|caffe2|torch|gloo)/")


def refuse(message):
    print(f"check_torch_headers.py: {message}", file=sys.stderr)
    sys.exit(2)


def units(compile_commands, match):
    """(file, argv, directory) of every unit built against Debian's LibTorch."""
    if not os.path.isfile(compile_commands):  # a FIFO or a device would block or never end
        refuse(f"cannot read {compile_commands} (not a regular file); configure a build first "
               "(cmake --preset release)")
    try:
        with open(compile_commands) as f:
            entries = json.load(f)
    except (OSError, ValueError) as e:
        refuse(f"cannot read {compile_commands} ({e}); configure a build first "
               "(cmake --preset release)")
    if not isinstance(entries, list):
        refuse(f"{compile_commands} is not a list of compile commands")
    out = []
    for entry in entries:
        if not isinstance(entry, dict) or not all(
                isinstance(entry.get(k), str) for k in ("file", "directory")):
            refuse(f"{compile_commands}: an entry without a file and a directory")
        argv = entry.get("arguments")
        if "command" in entry:
            try:
                argv = shlex.split(entry["command"])
            except (AttributeError, ValueError):
                argv = None
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            refuse(f"{compile_commands}: {entry['file']} has no command that reads as a list "
                   "of arguments")
        if DEBIAN_API not in argv:
            continue
        if match and not re.search(match, entry["file"]):
            continue
        out.append((entry["file"], argv, entry["directory"]))
    return out


def rewrite(argv, include, gloo, defines, depfile):
    """The unit's command with INCLUDE (and GLOO) where Debian's folder was,
    no output, its dependencies into `depfile`."""
    ours = ["-isystem", include, "-isystem", os.path.join(include, "torch/csrc/api/include")]
    if gloo:
        ours += ["-isystem", gloo]
    out, i = [], 0
    while i < len(argv):
        if argv[i] == "-o":
            i += 2
        elif argv[i] == "-isystem" and argv[i + 1:i + 2] == [DEBIAN_API]:
            out += ours
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out + [f"-D{d}" for d in defines] + ["-fsyntax-only", "-MD", "-MF", depfile]


def check(index, unit, include, gloo, defines, scratch):
    """(path, ok, lines to show) of one unit: its compiler errors when it
    does not compile, the Debian headers it reached when it does."""
    path, argv, directory = unit
    depfile = os.path.join(scratch, f"{index}.d")
    run = subprocess.run(rewrite(argv, include, gloo, defines, depfile), cwd=directory,
                         capture_output=True, text=True)
    if run.returncode != 0:
        errors = [line for line in run.stderr.splitlines() if "error" in line]
        return path, False, errors or run.stderr.splitlines()[-3:]
    if not os.path.exists(depfile):
        return path, False, ["the compiler wrote no dependency file, so the headers it used "
                             "cannot be checked"]
    with open(depfile) as f:
        deps = f.read().replace("\\\n", " ").split()
    stray = sorted({d for d in deps if DEBIAN_TORCH.match(d)})
    return path, not stray, [
        f"used Debian's {d}, which " + (f"{include} lacks" if "/gloo/" not in d or gloo
                                        else "no --gloo folder gives") for d in stray[:5]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--include", required=True, help="the other LibTorch's include folder")
    parser.add_argument("--gloo", default="", help="a folder holding gloo/ with its config.h")
    parser.add_argument("--compile-commands", default="build/release/compile_commands.json")
    parser.add_argument("--match", default="", help="only units whose path matches")
    parser.add_argument("--define", action="append", default=[], help="NAME[=VALUE], repeatable")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.include, "torch/csrc/api/include/torch/torch.h")):
        refuse(f"--include {args.include} holds no torch/csrc/api/include/torch/torch.h; give "
               "the include folder of a LibTorch (a wheel's torch/include)")
    if args.gloo and not os.path.isfile(os.path.join(args.gloo, "gloo/config.h")):
        refuse(f"--gloo {args.gloo} holds no gloo/config.h; give a folder with gloo's headers "
               "and a config.h written from its config.h.in")
    if not 1 <= args.jobs <= 64:
        refuse(f"--jobs {args.jobs} is outside 1..64")
    try:
        re.compile(args.match)
    except re.error as e:
        refuse(f"--match {args.match!r} is not a regular expression ({e})")
    todo = units(args.compile_commands, args.match)
    if not todo:
        refuse(f"no unit of {args.compile_commands} includes Debian's LibTorch"
               + (f" and matches {args.match!r}" if args.match else ""))
    include = os.path.abspath(args.include)
    gloo = os.path.abspath(args.gloo) if args.gloo else ""
    failed = 0
    with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(args.jobs) as pool:
        for path, ok, errors in pool.map(
                lambda iu: check(*iu, include, gloo, args.define, scratch), enumerate(todo)):
            print(("OK   " if ok else "FAIL ") + path, flush=True)
            if not ok:
                failed += 1
                for line in errors[:10]:
                    print("     " + line)
    print(f"{len(todo)} units, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
