"""Hostile arguments and files for every `python3 -m fulcrum.plot` command:
each refusal is one line on stderr and exit status 2, with the C++ side's
words where it has them, and never a traceback or a hang. A row is (what,
argv, words the message must hold)."""

import dataclasses
import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest

from hostile_inputs import DEEP, write

def metrics_line(**changes):
    record = {"step": 1, "dp_rank": 0, "microbatch": 0, "cp_strategy": "auto",
              "pairs": [10, 12], "tiles": [2, 3], "attention_ms": [1.0, None],
              "contiguous_imbalance": {"pairs": 1.2, "tiles": 1.1}}
    record.update(changes)
    return json.dumps(record)


STEP = json.dumps({"step": 1, "loss": 2.5, "dp_imbalance": 1.1,
                   "dp_round_robin_imbalance": 1.3, "dp_strategy": "auto"})


def metrics(tmp_path, *lines, raw=None):
    return write(tmp_path, "m.jsonl", raw if raw is not None else "\n".join(lines) + "\n")


def lengths_file(tmp_path, data):
    return write(tmp_path, "row.json", data)


def plan_case(what, options, words):
    """A PLOT_CASES row: ``plot plan`` of a 64-token row on 2 ranks with ``options``."""
    return (what, lambda t: ["plan", "--cp", "2", "--seq-len", "64", *options, "--out",
                             str(t / "o")], words)


def length_file_case(what, data, words):
    """A PLOT_CASES row: ``plot plan`` given a --doc-lengths-file holding ``data``."""
    return (what, lambda t: ["plan", "--cp", "2", "--doc-lengths-file",
                             str(lengths_file(t, data)), "--out", str(t / "o")], words)


PLOT_CASES = [
    # run
    ("metrics absent", lambda t: ["run", str(t / "none.jsonl")], ["does not exist"]),
    ("metrics a directory", lambda t: ["run", str(t)], ["is a directory, not a file"]),
    ("metrics a FIFO", lambda t: (os.mkfifo(t / "f"), ["run", str(t / "f")])[1],
     ["is a FIFO (named pipe), not a file"]),
    ("metrics a device", lambda t: ["run", "/dev/zero"], ["is a character device"]),
    ("metrics a /proc file", lambda t: ["run", "/proc/self/stat"], ["/proc or /sys file"]),
    ("metrics a socket", lambda t: (socket.socket(socket.AF_UNIX).bind(str(t / "s")),
                                    ["run", str(t / "s")])[1], ["is a socket, not a file"]),
    ("metrics empty path", lambda t: ["run", ""], ["is an empty path"]),
    ("metrics not UTF-8", lambda t: ["run", str(metrics(t, raw=b'{"step": "\xff"}\n'))],
     ["line 1 is not UTF-8"]),
    ("metrics nested deep", lambda t: ["run", str(metrics(t, "[" * DEEP))],
     ["nests lists or objects more than 64 deep"]),
    ("metrics NaN constant", lambda t: ["run", str(metrics(t, STEP.replace("2.5", "NaN")))],
     ["not a JSON line"]),
    ("metrics not JSON", lambda t: ["run", str(metrics(t, "{oops"))], ["not a JSON line"]),
    ("metrics a list", lambda t: ["run", str(metrics(t, "[1, 2]"))], ["not a record"]),
    ("metrics no steps", lambda t: ["run", str(metrics(t, metrics_line()))],
     ["has no step records"]),
    ("metrics no loss", lambda t: ["run", str(metrics(t, '{"step": 1}'))], ["has no 'loss'"]),
    ("metrics loss a string", lambda t: ["run", str(metrics(t, STEP.replace("2.5", '"x"')))],
     ["loss is 'x', not a finite number within +-1e30"]),
    # Numbers: non-finite and absurd magnitudes, refused before matplotlib
    # overflows on them (1e308) or draws infinity (1e999 reads as inf).
    ("metrics loss 1e308", lambda t: ["run", str(metrics(t, STEP.replace("2.5", "1e308")))],
     ["line 1: loss is 1e+308, not a finite number within +-1e30"]),
    ("metrics loss -1e308", lambda t: ["run", str(metrics(t, STEP.replace("2.5", "-1e308")))],
     ["loss is -1e+308"]),
    ("metrics loss 1e999", lambda t: ["run", str(metrics(t, STEP.replace("2.5", "1e999")))],
     ["loss is inf, not a finite number"]),
    ("metrics imbalance 1e31", lambda t: ["run", str(metrics(
        t, STEP.replace("1.1", "1e31")))], ["dp_imbalance is 1e+31"]),
    ("metrics pairs 1e308", lambda t: ["run", str(metrics(t, STEP, metrics_line(
        pairs=[1.0, 1e308])))], ["line 2: pairs is [1.0, 1e+308], not a list of finite"]),
    ("metrics attention 1e999", lambda t: ["run", str(metrics(t, STEP, metrics_line(
        attention_ms=[1.0, 7.0]).replace("7.0", "1e999")))], ["attention_ms is [1.0, inf]"]),
    ("metrics baseline -1e999", lambda t: ["run", str(metrics(t, STEP, metrics_line(
        contiguous_imbalance={"pairs": 7.0, "tiles": 1.0}).replace("7.0", "-1e999")))],
     ["contiguous_imbalance: pairs is -inf"]),
    ("metrics scheduler a list", lambda t: ["run", str(metrics(t, STEP, json.dumps(
        {"step": 1, "scheduler": [], "ranks": [{"rank": 0, "busy_ms": 1.0,
                                                 "attention_ms": 1.0}]})))],
     ["scheduler is [], not a scheduler name"]),
    ("metrics huge rank", lambda t: ["run", str(metrics(t, STEP, metrics_line(dp_rank=2**60)))],
     ["dp_rank is 1152921504606846976"]),
    ("metrics negative rank", lambda t: ["run", str(metrics(t, STEP, metrics_line(dp_rank=-1)))],
     ["dp_rank is -1"]),
    ("metrics bool rank", lambda t: ["run", str(metrics(t, STEP, metrics_line(dp_rank=True)))],
     ["dp_rank is True"]),
    ("metrics pairs a dict", lambda t: ["run", str(metrics(t, STEP, metrics_line(pairs={})))],
     ["pairs is {}"]),
    ("metrics attention strings", lambda t: ["run", str(metrics(
        t, STEP, metrics_line(attention_ms=["a"])))], ["attention_ms is"]),
    ("metrics no baseline", lambda t: ["run", str(metrics(
        t, STEP, metrics_line(contiguous_imbalance=None)))], ["contiguous_imbalance is None"]),
    ("metrics DP x CP too many", lambda t: ["run", str(metrics(
        t, STEP, metrics_line(dp_rank=2**19, attention_ms=[1.0] * 8)))], ["DP x", "CP ranks"]),
    ("metrics too many bars", lambda t: ["run", str(metrics(
        t, STEP, metrics_line(dp_rank=1024, attention_ms=[1.0])))],
     ["1025 DP x 1 CP ranks, more than the 1024"]),
    ("too many pixels", lambda t: ["run", str(METRICS), "--dpi", "1200", "--formats", "png"],
     ["13200 x 8400 pixels"]),
    ("compare of too many ranks", lambda t: ["plan", "--cp", "2048", "--seq-len", "4096",
                                             "--out", str(t / "o")], ["too many bars"]),
    ("tile map of too many ranks", lambda t: ["plan", "--cp", "65", "--seq-len", "4096",
                                              "--strategy", "contiguous", "--out", str(t / "o")],
     ["too many panels"]),
    # plan: work bounded before planning, the row, the ranks and the pictures together
    ("compare of a long row on many ranks", lambda t: [
        "plan", "--cp", "128", "--seq-len", "33554432", "--out", str(t / "o")],
     ["a row of 33554432 tokens in 1 document (262144 blocks of 128) on 128 ranks with 8 "
      "strategies would take about", "GB, more than the 4 s and 1.5 GB python3 -m fulcrum.plot "
      "plan allows; give a shorter row, a larger --block-size or fewer ranks"]),
    ("tile map of a long row", lambda t: [
        "plan", "--cp", "64", "--seq-len", "33554432", "--strategy", "contiguous",
        "--block-size", "4096", "--out", str(t / "o")],
     ["a row of 33554432 tokens in 1 document (8192 blocks of 4096) on 64 ranks as a tile map "
      "would take about"]),
    ("tile map of many small tiles", lambda t: [
        "plan", "--cp", "8", "--doc-lengths", "2097152,2097152", "--strategy", "contiguous",
        "--block-size", "512", "--out", str(t / "o")],
     ["in 2 documents (8192 blocks of 512) on 8 ranks as a tile map"]),
    ("compare of many bars", lambda t: ["plan", "--cp", "1024", "--seq-len", "4096",
                                        "--out", str(t / "o")],
     ["on 1024 ranks with 8 strategies would take about"]),
    ("tile map of many panels in two formats", lambda t: [
        "plan", "--cp", "64", "--seq-len", "4096", "--strategy", "contiguous", "--out",
        str(t / "o")], ["as a tile map would take about", "or one of --formats png or svg"]),
    # plan: options
    # plan: options
    ("cp not a number", lambda t: ["plan", "--cp", "x", "--seq-len", "64", "--out", str(t / "o")],
     ["--cp", "invalid int value"]),
    ("cp zero", lambda t: ["plan", "--cp", "0", "--seq-len", "64", "--out", str(t / "o")],
     ["--cp must be an integer from 1 to 1048576, got '0'"]),
    ("cp huge", lambda t: ["plan", "--cp", str(2**40), "--seq-len", "64", "--out", str(t / "o")],
     ["--cp must be an integer from 1"]),
    ("seq-len negative", lambda t: ["plan", "--cp", "2", "--seq-len", "-5", "--random-docs", "1",
                                    "--out", str(t / "o")], ["--seq-len must be an integer"]),
    ("seq-len huge", lambda t: ["plan", "--cp", "2", "--seq-len", str(2**40), "--random-docs",
                                "1", "--out", str(t / "o")], ["--seq-len must be an integer"]),
    plan_case("seed negative", ["--random-docs", "-1"], ["--synthetic-docs must be an integer"]),
    ("random-docs alone", lambda t: ["plan", "--cp", "2", "--doc-lengths", "5", "--random-docs",
                                     "1", "--out", str(t / "o")],
     ["--synthetic-docs needs --seq-len"]),
    ("no row", lambda t: ["plan", "--cp", "2", "--out", str(t / "o")], ["no row given"]),
    plan_case("two rows", ["--doc-lengths", "64"], ["more than one row given"]),
    plan_case("block-size zero", ["--block-size", "0"], ["--block-size must be an integer"]),
    plan_case("dpi zero", ["--dpi", "0"], ["--dpi must be an integer"]),
    plan_case("dpi huge", ["--dpi", str(10**6)], ["--dpi must be an integer"]),
    plan_case("formats jpg", ["--formats", "jpg"], ["--formats 'jpg'"]),
    ("out empty", lambda t: ["plan", "--cp", "2", "--seq-len", "64", "--out", ""],
     ["--out is empty"]),
    ("out under a file", lambda t: ["plan", "--cp", "2", "--seq-len", "64", "--out",
                                    str(write(t, "f", "x")) + "/o"], ["cannot write --out"]),
    ("out a FIFO", lambda t: (os.mkfifo(t / "o.png"), ["plan", "--cp", "2", "--seq-len", "64",
                                                      "--formats", "png", "--out",
                                                      str(t / "o")])[1],
     ["o.png' is a FIFO (named pipe), not a file"]),
    ("out a directory", lambda t: ((t / "o.svg").mkdir(), ["run", str(METRICS), "--formats",
                                                           "svg"])[1],
     ["o.svg' is a directory, not a file"]),
    plan_case("plugin empty", ["--plugin", ""], ["empty plugin name"]),
    plan_case("mask unknown", ["--mask", "diagonal"], ["mask 'diagonal' is unknown"]),
    plan_case("strategy unknown", ["--strategy", "nope"], ["'nope'"]),
    plan_case("unknown option", ["--bogus"], ["unrecognized arguments: --bogus"]),
    ("no command", lambda t: [], ["required"]),
    # plan: --doc-lengths, in the CLI's words
    ("lengths a word", lambda t: ["plan", "--cp", "2", "--doc-lengths", "5,a", "--out",
                                  str(t / "o")],
     ["--doc-lengths: item 2 is 'a', not a positive integer; give comma-separated positive "
      "integers"]),
    ("lengths a plus", lambda t: ["plan", "--cp", "2", "--doc-lengths", "+5", "--out",
                                  str(t / "o")], ["item 1 is '+5'"]),
    ("lengths zero", lambda t: ["plan", "--cp", "2", "--doc-lengths", "0", "--out",
                                str(t / "o")], ["item 1 is '0'"]),
    ("lengths an empty item", lambda t: ["plan", "--cp", "2", "--doc-lengths", "5,,6", "--out",
                                         str(t / "o")], ["item 2 is empty"]),
    ("lengths empty", lambda t: ["plan", "--cp", "2", "--doc-lengths", " ", "--out",
                                 str(t / "o")], ["--doc-lengths is empty"]),
    ("lengths underscores", lambda t: ["plan", "--cp", "2", "--doc-lengths", "1_0", "--out",
                                       str(t / "o")], ["item 1 is '1_0'"]),
    ("lengths non-ASCII", lambda t: ["plan", "--cp", "2", "--doc-lengths", "\u0663", "--out",
                                     str(t / "o")], ["not a positive integer"]),
    ("lengths past int64", lambda t: ["plan", "--cp", "2", "--doc-lengths", str(2**64),
                                      "--out", str(t / "o")], ["not a positive integer"]),
    ("lengths past the row bound", lambda t: ["plan", "--cp", "2", "--doc-lengths",
                                              f"{2**31},1", "--out", str(t / "o")],
     ["adds up to more than 2147483648 tokens"]),
    # plan: --doc-lengths-file
    ("file absent", lambda t: ["plan", "--cp", "2", "--doc-lengths-file", str(t / "x.json"),
                               "--out", str(t / "o")], ["does not exist; give a file holding"]),
    ("file a FIFO", lambda t: (os.mkfifo(t / "f"), ["plan", "--cp", "2", "--doc-lengths-file",
                                                    str(t / "f"), "--out", str(t / "o")])[1],
     ["is a FIFO (named pipe), not a file"]),
    length_file_case("file deep", "[" * DEEP,
                     ["nests lists or objects more than 64 deep at byte 64"]),
    length_file_case("file floats", "[3.0]", ["item 1 is '3.0', not a positive integer"]),
    length_file_case("file bools", "[true]", ["item 1 is 'true'"]),
    length_file_case("file NaN", "[NaN]", ["is not valid JSON (NaN is not a JSON number)"]),
    length_file_case("file past int64", f"[{2**64}]", ["item 1 is"]),
    length_file_case("file 1e400", "[1e400]", ["item 1 is"]),
    length_file_case("file of many digits", "[" + "9" * 5000 + "]", ["number out of range"]),
    length_file_case("file not UTF-8", b"[1, \xff]", ["is not valid JSON at byte 4"]),
    length_file_case("file an object", "{}", ["holds a JSON object, not a list"]),
    length_file_case("file empty list", "[]", ["holds an empty list"]),
    ("file a non-UTF-8 name", lambda t: ["plan", "--cp", "2", "--doc-lengths-file",
                                         os.fsdecode(bytes(t) + b"/\xff.json"), "--out",
                                         str(t / "o")], ["\\xff.json", "does not exist"]),
]


@pytest.fixture
def plot_main(plugin_path, monkeypatch):
    pytest.importorskip("matplotlib", reason="python3-matplotlib is not installed")
    from fulcrum import plot

    monkeypatch.setenv("FULCRUM_PLUGIN_PATH", str(plugin_path.parent))
    return plot.main


@pytest.mark.parametrize("what,argv,words", PLOT_CASES, ids=[c[0] for c in PLOT_CASES])
def test_plot_refusals(what, argv, words, plot_main, tmp_path, capsys):
    args = argv(tmp_path)
    if args[:1] == ["run"]:
        args += ["--out", str(tmp_path / "o")]
    try:
        code = plot_main(args)
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert err.startswith("fulcrum.plot: ") and err.endswith("\n") and err.count("\n") == 1, err
    for word in words:
        assert word in err, err


def test_plot_accepts_what_the_cli_accepts(plot_main, tmp_path, capsys):
    """The strict readers still take every well-formed input: a lengths list
    with spaces, a JSON file, the quickstart's metrics."""
    row = lengths_file(tmp_path, " [ 100 , 28 ]\n")
    for argv in (["plan", "--cp", "2", "--doc-lengths", " 100, 28", "--formats", "png",
                  "--out", str(tmp_path / "a")],
                 ["plan", "--cp", "2", "--doc-lengths-file", str(row), "--strategy", "auto",
                  "--formats", "png", "--out", str(tmp_path / "b")],
                 ["run", str(METRICS), "--formats", "svg", "--out", str(tmp_path / "c")]):
        assert plot_main(argv) == 0, capsys.readouterr()
    assert capsys.readouterr().out.split() == [str(tmp_path / "a.png"), str(tmp_path / "b.png"),
                                               str(tmp_path / "c.svg")]


NAMES_FROM_DATA = ["$x^$", "$\\undefinedmacro$", "\ud800", "tab\there", "y" * 1_000_000]


def test_plot_draws_names_from_data_literally(plot_main, balancer, tmp_path, capsys):
    """Strategy names come from a metrics file or a plugin: mathtext ('$x^$'
    is a ValueError in matplotlib), a lone surrogate (the SVG writer cannot
    encode it), controls and a megabyte of name (a raster overflow) are all
    drawn literally, escaped and cut, and the pictures are written."""
    from fulcrum import plot

    for names in (NAMES_FROM_DATA, ["\ud800\u2028"]):
        lines = [STEP.replace('"auto"', json.dumps(name)) for name in names]
        lines += [metrics_line(cp_strategy=name) for name in names]
        path = metrics(tmp_path, *lines)
        assert plot_main(["run", str(path), "--out", str(tmp_path / "r")]) == 0, \
            capsys.readouterr()
        fig = plot.run_figure(str(path))
        cp_title = fig.axes[1].get_title()
        dp_label = fig.axes[2].get_legend().get_texts()[0].get_text()
        plot.plt.close(fig)
        for text in (cp_title, dp_label):
            assert len(text) < 200, len(text)
            assert "\ud800" not in text and "\t" not in text, text
            if len(names) > 1:
                assert "\\$x^\\$" in text and "\\$\\undefinedmacro\\$" in text, text
                assert "tab\\x09here" in text, text
            else:
                assert text.endswith("\\ud800\u2028"), text

    # A plugin's names, in the comparison and the tile map.
    real = balancer.plan_cp("contiguous", cp=2, tokens=512)
    for requested, used in (("$x^$", "$\\frac{$"), ("y" * 1_000_000, "\ud800")):
        named = dataclasses.replace(real, requested=requested, used=used)
        for fig in (plot.plan_compare_figure([real, named]), plot.tile_map_figure(named)):
            assert plot.save(fig, str(tmp_path / "p"), ("png", "svg")) == [
                str(tmp_path / "p.png"), str(tmp_path / "p.svg")]


def test_a_failure_inside_matplotlib_is_one_line(plot_main, monkeypatch, tmp_path, capsys):
    """The last guard: whatever the drawing raises past the checks reaches
    the user as one line and exit 2, not a traceback."""
    from fulcrum import plot

    def fails(path):
        raise ValueError("$x^$\n              ^\nExpected end of text")

    monkeypatch.setattr(plot, "run_figure", fails)
    assert plot_main(["run", str(METRICS), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("fulcrum.plot: drawing failed (ValueError: "), err


METRICS = pathlib.Path(__file__).parent / "data" / "quickstart_metrics.jsonl"


def plot_process(plugin_path, *argv):
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).parents[1]),
               MPLBACKEND="Agg", FULCRUM_PLUGIN_PATH=str(plugin_path.parent))
    return subprocess.run([sys.executable, "-m", "fulcrum.plot", *argv], capture_output=True,
                          env=env, timeout=120)


def test_plot_command_line_in_a_process(plugin_path, tmp_path):
    """As a user runs it: a bad option is one line and exit 2; an --out that
    is not UTF-8 is written and printed as the bytes it is."""
    pytest.importorskip("matplotlib", reason="python3-matplotlib is not installed")
    done = plot_process(plugin_path, "plan", "--cp", "2", "--doc-lengths", "5,-1", "--out",
                        str(tmp_path / "o"))
    assert done.returncode == 2 and done.stdout == b""
    assert done.stderr == (b"fulcrum.plot: --doc-lengths: item 2 is '-1', not a positive "
                           b"integer; give comma-separated positive integers, e.g. "
                           b"4096,812,77\n")
    out = bytes(tmp_path) + b"/pic\xff"
    try:
        done = plot_process(plugin_path, "run", str(METRICS), "--formats", "svg", "--out",
                            os.fsdecode(out))
        assert done.returncode == 0, done.stderr
        assert done.stdout == out + b".svg\n"
        assert os.path.exists(out + b".svg")
    finally:  # pytest's own tmp_path bookkeeping expects UTF-8 names
        if os.path.exists(out + b".svg"):
            os.remove(out + b".svg")


def test_plot_without_matplotlib_says_what_to_install(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).parents[1]))
    hide = "import sys; sys.modules['matplotlib'] = None; "
    done = subprocess.run([sys.executable, "-c", hide + "import runpy; runpy.run_module("
                           "'fulcrum.plot', run_name='__main__')", "run", "x", "--out", "y"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2
    assert done.stderr == ("fulcrum.plot: drawing needs matplotlib, which is not installed; "
                           "install it (Debian: python3-matplotlib)\n")
    done = subprocess.run([sys.executable, "-c", hide + "import fulcrum\ntry:\n"
                           "    import fulcrum.plot\nexcept fulcrum.FulcrumError as e:\n"
                           "    print(e.code)"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.stdout == "not_found\n", done.stderr
