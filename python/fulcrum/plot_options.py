"""The options of ``python3 -m fulcrum.plot``: the row given by length list,
length file or seeded synthetic documents, each checked with the C++ CLI's
rules, and the work of a picture bounded before anything is planned."""

import argparse
import json
import sys

from . import _input_file
from . import work as work_model
from .errors import FulcrumError
from .run_metrics import _NotJson, _is_int, _no_constant
from .synthetic import random_docs

# The C++ CLI's rules for lengths (runtime/cli/cli_common.cpp), in its words.
_LENGTH_LIST_HINT = "give comma-separated positive integers, e.g. 4096,812,77"
_LENGTH_FILE_HINT = "give a file holding a JSON list of positive integers, e.g. [4096, 812, 77]"
_MAX_LENGTH_FILE_BYTES = 256 << 20
_MAX_LENGTH_FILE_DEPTH = 64
_MAX_TOKENS = 1 << 31
_MAX_CP = 1 << 20
_MAX_DPI = 1200


def _quote(text):
    return "'" + "".join(" " if ord(c) < 0x20 or ord(c) == 0x7F else c
                         for c in text[:60] + ("..." if len(text) > 60 else "")) + "'"


def parse_length_list(text, option="--doc-lengths"):
    """``a,b,c`` as positive integers, as the CLI's --doc-lengths."""
    if not text.strip(" \t"):
        raise FulcrumError("invalid_argument", f"{option} is empty; {_LENGTH_LIST_HINT}")
    lengths = []
    for index, item in enumerate(text.split(","), 1):
        item = item.strip(" \t")
        if not (item.isascii() and item.lstrip("-").isdigit() and item.count("-") <= 1
                and not item.startswith("+")) or int(item) < 1 or int(item) > 2**63 - 1:
            raise FulcrumError("invalid_argument", f"{option}: item {index} is "
                               f"{_quote(item) if item else 'empty'}, not a positive integer; "
                               f"{_LENGTH_LIST_HINT}")
        lengths.append(int(item))
    return _total_tokens(lengths, option)


def read_length_file(path, option="--doc-lengths-file"):
    """A JSON list of positive integers, read as the CLI's --doc-lengths-file."""
    what = f"{option} {_input_file.shown(path)}"
    rules = _input_file.InputRules(what, _LENGTH_FILE_HINT, _MAX_LENGTH_FILE_BYTES)
    raw = _input_file.read_input_file(path, rules)
    within, at = _input_file.json_nesting_within(raw, _MAX_LENGTH_FILE_DEPTH)
    if not within:
        raise FulcrumError("invalid_argument", f"{what} nests lists or objects more than "
                           f"{_MAX_LENGTH_FILE_DEPTH} deep at byte {at}; {_LENGTH_FILE_HINT}")
    text = raw.decode("utf-8", "surrogateescape")
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        byte = len(text[:error.pos].encode("utf-8", "surrogateescape"))
        raise FulcrumError("invalid_argument", f"{what} is not valid JSON at byte {byte} "
                           f"({error.msg}); {_LENGTH_FILE_HINT}") from None
    except _NotJson as error:
        raise FulcrumError("invalid_argument", f"{what} is not valid JSON ({error}); "
                           f"{_LENGTH_FILE_HINT}") from None
    except (ValueError, RecursionError):
        raise FulcrumError("invalid_argument", f"{what} holds a number out of range; "
                           f"{_LENGTH_FILE_HINT}") from None
    if not isinstance(value, list):
        kind = {dict: "object", str: "string", bool: "boolean", type(None): "null"}.get(
            type(value), "number")
        raise FulcrumError("invalid_argument", f"{what} holds a JSON {kind}, not a list; "
                           f"{_LENGTH_FILE_HINT}")
    if not value:
        raise FulcrumError("invalid_argument", f"{what} holds an empty list; {_LENGTH_FILE_HINT}")
    for index, item in enumerate(value, 1):
        if not _is_int(item, 1):
            raise FulcrumError("invalid_argument", f"{what}: item {index} is "
                               f"{_quote(json.dumps(item, separators=(',', ':')))}, not a "
                               f"positive integer; {_LENGTH_FILE_HINT}")
    return _total_tokens(value, option)


def _total_tokens(lengths, option):
    if sum(lengths) > _MAX_TOKENS:
        raise FulcrumError("invalid_argument", f"{option} adds up to more than {_MAX_TOKENS} "
                           "tokens, the longest row fulcrum plans; give a shorter row")
    return lengths


def _row(args):
    given = [flag for flag, value in (("--seq-len", args.seq_len),
                                      ("--lengths", args.lengths),
                                      ("--lengths-file", args.lengths_file),
                                      ("--doc-lengths", args.doc_lengths),
                                      ("--doc-lengths-file", args.doc_lengths_file))
             if value is not None]
    if len(given) != 1:
        raise FulcrumError("invalid_argument", ("no row given" if not given else
                                                "more than one row given") +
                           "; give exactly one of --seq-len N (with --synthetic-docs SEED), "
                           "--lengths a,b,c or --lengths-file F.json")
    if args.random_docs is not None and args.seq_len is None:
        raise FulcrumError("invalid_argument", "--synthetic-docs needs --seq-len N, the row "
                           "length to fill with documents; e.g. --seq-len 65536 --synthetic-docs 1")
    if args.seq_len is not None:
        if not 1 <= args.seq_len <= _MAX_TOKENS:
            raise FulcrumError("invalid_argument", f"--seq-len must be an integer from 1 to "
                               f"{_MAX_TOKENS}, got '{args.seq_len}'; give the row length in "
                               "tokens, e.g. --seq-len 131072")
        if args.random_docs is None:
            return None
        if not 0 <= args.random_docs < 2**64:
            raise FulcrumError("invalid_argument", f"--synthetic-docs must be an integer from 0 "
                               f"to {2**64 - 1}, got '{args.random_docs}'; give a seed, e.g. "
                               "--synthetic-docs 1")
        return random_docs(args.seq_len, args.random_docs)
    if args.doc_lengths is not None:
        return parse_length_list(args.doc_lengths, "--doc-lengths")
    if args.lengths is not None:
        return parse_length_list(args.lengths, "--lengths")
    if args.lengths_file is not None:
        return read_length_file(args.lengths_file, "--lengths-file")
    return read_length_file(args.doc_lengths_file, "--doc-lengths-file")


# What one picture may take, as `fulcrum plan` bounds its work
# (runtime/cli/work_bounds.h): refused before planning, in one line with the
# estimate, past these.
_MAX_SECONDS = 4.0
_MAX_BYTES = 1.5e9


def estimate_plot_plan(tokens, doc_lengths, block_size, cp, strategies, tile_map, formats):
    """(what, seconds, bytes) of ``plot plan``: planning ``strategies``
    plans of the row by the CLI's rule (estimate_plan), plus what the
    plotter adds. The coefficients are upper envelopes of /usr/bin/time
    measurements on the 2-core development machine at a load average of 8
    to 10 (docs/RELIABILITY.md, "Bounded before it starts"): per format,
    1.2 ms a bar of the comparison (one per rank and strategy) and 60 ms a
    panel of the tile map; for the tile map, 160 ns and 40 bytes a token
    (the plan's copies and the map's computation) and 110 ns and 16 bytes a
    tile drawn. Startup (about 1.3 s) is not counted."""
    lengths = [tokens] if doc_lengths is None else doc_lengths
    blocks = sum(-(-length // block_size) for length in lengths)
    n, u, p = float(tokens), float(blocks), float(cp)
    seconds = strategies * (80e-9 * n + 430e-9 * u + 15e-6 * p)
    size = 16.0 * n * strategies + 90.0 * u + 2200.0 * p
    if tile_map:
        cells = p * -(-(-(-tokens // cp)) // block_size) * -(-tokens // block_size)
        seconds += 160e-9 * n + 110e-9 * cells + 60e-3 * p * formats
        size += 40.0 * n + 16.0 * cells
    else:
        seconds += 1.2e-3 * p * strategies * formats
    docs = len(lengths)
    what = (f"a row of {tokens} tokens in {docs} document{'s' if docs != 1 else ''} ({blocks} "
            f"block{'s' if blocks != 1 else ''} of {block_size}) on {cp} rank"
            f"{'s' if cp != 1 else ''}" + (" as a tile map" if tile_map else
                                           f" with {strategies} strategies"))
    return what, seconds, size


def _within_bounds(estimate):
    return estimate[1] <= _MAX_SECONDS and estimate[2] <= _MAX_BYTES


def _refuse_beyond_bounds(tokens, docs, block_size, cp, strategies, tile_map, formats):
    """Raises FulcrumError when estimate_plot_plan is past the bounds,
    naming the estimate and what to shrink."""
    estimate = estimate_plot_plan(tokens, docs, block_size, cp, strategies, tile_map, formats)
    if _within_bounds(estimate):
        return
    what, seconds, size = estimate
    advice = "give a shorter row, a larger --block-size or fewer ranks"
    if formats > 1 and _within_bounds(estimate_plot_plan(tokens, docs, block_size, cp,
                                                         strategies, tile_map, 1)):
        advice += ", or one of --formats png or svg"
    if not tile_map and _within_bounds(estimate_plot_plan(tokens, docs, block_size, cp, 1, True,
                                                          formats)):
        advice += ", or one --strategy for its tile map"
    raise FulcrumError("invalid_argument", f"{what} would take about {seconds:.1f} s and "
                       f"{size / 1e9:.1f} GB, more than the {_MAX_SECONDS:.0f} s and "
                       f"{_MAX_BYTES / 1e9:.1f} GB python3 -m fulcrum.plot plan allows; {advice}")


def _check_options(args):
    if args.command == "plan" and not 1 <= args.cp <= _MAX_CP:
        raise FulcrumError("invalid_argument", f"--cp must be an integer from 1 to {_MAX_CP}, "
                           f"got '{args.cp}'; give the number of CP ranks, e.g. --cp 8")
    if args.command == "plan" and not 1 <= args.block_size <= _MAX_TOKENS:
        raise FulcrumError("invalid_argument", f"--block-size must be an integer from 1 to "
                           f"{_MAX_TOKENS}, got '{args.block_size}'; give the tile edge, e.g. 128")
    if not 1 <= args.dpi <= _MAX_DPI:
        raise FulcrumError("invalid_argument", f"--dpi must be an integer from 1 to {_MAX_DPI}, "
                           f"got '{args.dpi}'; give the PNG resolution, e.g. --dpi 110")
    if args.command == "plan":
        work_model.Mask.parse(args.mask)
    if not args.out:
        raise FulcrumError("invalid_argument", "--out is empty; give an output prefix, e.g. "
                           "--out plans/compare")


class _Parser(argparse.ArgumentParser):
    """argparse's usage errors as one line and exit 2, like every other refusal."""

    def error(self, message):
        print(f"fulcrum.plot: {' '.join(message.split())}; see python3 -m fulcrum.plot "
              f"{'' if self.prog.endswith('plot') else self.prog.split()[-1] + ' '}--help",
              file=sys.stderr)
        sys.exit(2)


def build_parser(description):
    """The argument parser of ``python3 -m fulcrum.plot``."""
    parser = _Parser(prog="python3 -m fulcrum.plot", description=description,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    plan = sub.add_parser("plan", help="per-rank work of every strategy, or one plan's tile map")
    plan.add_argument("--plugin", default="fulcrum_balancer", help="plugin name or path")
    plan.add_argument("--cp", type=int, required=True)
    plan.add_argument("--seq-len", type=int)
    plan.add_argument("--synthetic-docs", "--random-docs", dest="random_docs", type=int,
                      metavar="SEED",
                      help="fill --seq-len with seeded packed documents, the mix of fulcrum "
                           "plan --synthetic-docs (--random-docs: the same, its earlier name)")
    plan.add_argument("--lengths", metavar="a,b,c",
                      help="row of packed documents with these lengths")
    plan.add_argument("--lengths-file", metavar="F.json",
                      help="row of packed documents whose lengths are a JSON list in F.json")
    plan.add_argument("--doc-lengths", metavar="a,b,c", help="the same as --lengths (its "
                      "earlier name)")
    plan.add_argument("--doc-lengths-file", metavar="F.json", help="the same as --lengths-file "
                      "(its earlier name)")
    plan.add_argument("--block-size", type=int, default=128)
    plan.add_argument("--mask", default="causal")
    plan.add_argument("--strategy", help="draw this plan's tile map instead of comparing")
    plan.add_argument("--out", required=True, help="output prefix: PREFIX.png, PREFIX.svg")
    plan.add_argument("--formats", default="png,svg")
    plan.add_argument("--dpi", type=int, default=110, help="PNG resolution")
    run = sub.add_parser("run", help="a training run's metrics file")
    run.add_argument("metrics", help="the JSONL file of fulcrum train --metrics")
    run.add_argument("--out", required=True, help="output prefix: PREFIX.png, PREFIX.svg")
    run.add_argument("--formats", default="png,svg")
    run.add_argument("--dpi", type=int, default=110, help="PNG resolution")
    return parser
