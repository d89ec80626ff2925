"""Hostile arguments and files for every public function and every
`python3 -m fulcrum.plot` command: each refusal is one FulcrumError (or, for
the command, one line on stderr and exit status 2) with the C++ side's words
where it has them, and never a TypeError, UnicodeError, RecursionError,
OverflowError or a hang. One table per surface; a row is (what, call, code,
words the message must hold)."""

import dataclasses
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

import fulcrum
from fulcrum import FulcrumError, _input_file
from fulcrum.schedule import CostProfile

PROFILE = CostProfile.bundled("cpu_gloo").to_mapping()
DEEP = 100000  # past Python's recursion limit, far past every reader's bound


def refused(call, code, words):
    try:
        result = call()
    except FulcrumError as error:
        text = str(error)
        assert error.code == code, text
        assert "\n" not in text and text == text.strip()
        for word in words:
            assert word in text, text
        return text
    raise AssertionError(f"accepted: {result!r}")


def nested(depth):
    value = [1]
    for _ in range(depth):
        value = [value]
    return value


# -- load -------------------------------------------------------------------------

LOAD_CASES = [
    ("an int", lambda t: fulcrum.load(5), "invalid_argument", ["plugin is 5, not a path"]),
    ("None", lambda t: fulcrum.load(None), "invalid_argument", ["not a path"]),
    ("a list", lambda t: fulcrum.load([]), "invalid_argument", ["not a path"]),
    ("empty", lambda t: fulcrum.load(""), "invalid_argument", ["empty plugin name"]),
    ("a NUL byte", lambda t: fulcrum.load("fulcrum\0x"), "invalid_argument", ["NUL byte"]),
    ("non-UTF-8 bytes", lambda t: fulcrum.load(b"\xff\xfe", search_dirs=[str(t)]), "not_found",
     ["\\xff\\xfe", "not found"]),
    ("a lone surrogate", lambda t: fulcrum.load("\udcff", search_dirs=[str(t)]), "not_found",
     ["not found"]),
    ("search_dirs as one string", lambda t: fulcrum.load("x", search_dirs=str(t)),
     "invalid_argument", ["one path; give a list of directories"]),
    ("search_dirs an int", lambda t: fulcrum.load("x", search_dirs=5), "invalid_argument",
     ["give a list of directories"]),
    ("search_dirs holding an int", lambda t: fulcrum.load("x", search_dirs=[5]),
     "invalid_argument", ["search_dirs entry is 5"]),
    ("a device", lambda t: fulcrum.load("/dev/null"), "invalid_argument",
     ["not a regular file"]),
    ("a directory", lambda t: fulcrum.load(str(t) + "/"), "invalid_argument",
     ["not a regular file"]),
    ("a text file", lambda t: fulcrum.load("/etc/hostname" if os.path.isfile("/etc/hostname")
                                           else "/etc/passwd"),
     "invalid_argument", ["not a complete shared library", "no ELF header"]),
    ("a dangling link", lambda t: (os.symlink(t / "gone.so", t / "link.so"),
                                   fulcrum.load(str(t / "link.so"))),
     "invalid_argument", ["dangling link"]),
]


@pytest.mark.parametrize("what,call,code,words", LOAD_CASES, ids=[c[0] for c in LOAD_CASES])
def test_load_refusals(what, call, code, words, tmp_path):
    refused(lambda: call(tmp_path), code, words)


def plugin_copy(plugin_path, tmp_path, mode=0o755):
    home = tmp_path / "plugins"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    copy = home / "libcopy.so"
    shutil.copy(plugin_path, copy)
    copy.chmod(mode)
    return home, copy


def test_a_truncated_plugin_is_refused_before_dlopen(plugin_path, tmp_path):
    home, copy = plugin_copy(plugin_path, tmp_path)
    size = copy.stat().st_size
    for keep in (0, 40, 64 + 10, size // 2, size - 1):
        with open(copy, "r+b") as f:
            f.truncate(keep)
        refused(lambda: fulcrum.load(str(copy)), "invalid_argument",
                ["not a complete shared library", f"file size {keep} bytes"])
        shutil.copy(plugin_path, copy)


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
@pytest.mark.parametrize("which", ["file", "directory", "parent"])
def test_a_plugin_owned_by_someone_else_is_refused(which, plugin_path, tmp_path):
    home, copy = plugin_copy(plugin_path, tmp_path)
    target = {"file": copy, "directory": home, "parent": tmp_path}[which]
    os.chown(target, 65534, -1)
    refused(lambda: fulcrum.load(str(copy)), "permission",
            ["owned by uid 65534", "neither root nor this user", str(target)])
    with fulcrum.load(str(copy), check_permissions=False) as b:
        assert b.name == "fulcrum"


def test_a_writable_directory_above_the_plugin_is_refused(plugin_path, tmp_path):
    home, copy = plugin_copy(plugin_path, tmp_path)
    tmp_path.chmod(0o777)  # not sticky: anyone could rename plugins/ away
    try:
        refused(lambda: fulcrum.load(str(copy)), "permission",
                ["the directory on its path", "0777", f"chmod go-w {tmp_path}"])
        tmp_path.chmod(0o1777)  # sticky and ours, like /tmp: allowed
        with fulcrum.load(str(copy)) as b:
            assert b.name == "fulcrum"
    finally:
        tmp_path.chmod(0o755)


def test_a_link_through_a_writable_directory_is_refused(plugin_path, tmp_path):
    """The path as given is checked too: a link in a directory others may
    write could be pointed elsewhere."""
    home, copy = plugin_copy(plugin_path, tmp_path)
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    os.symlink(copy, open_dir / "libcopy.so")
    try:
        refused(lambda: fulcrum.load(str(open_dir / "libcopy.so")), "permission",
                [str(open_dir), "0777"])
    finally:
        open_dir.chmod(0o755)


# -- plan_cp, partition_dp, schedule ----------------------------------------------------

def plan(**kwargs):
    args = dict(cp=2, doc_lengths=[100, 28])
    args.update(kwargs)
    return lambda b: b.plan_cp(args.pop("strategy", "auto"), **args)


def partition(**kwargs):
    args = dict(lengths=[5, 10, 20], dp=2)
    args.update(kwargs)
    return lambda b: b.partition_dp(args.pop("lengths"), args.pop("dp"), **args)


def schedule(**kwargs):
    args = dict(world=2, max_tokens_per_rank=128, doc_lengths=[100, 20], profile=PROFILE)
    args.update(kwargs)
    return lambda b: b.schedule("hybrid", **args)


CALL_CASES = [
    # plan_cp
    ("cp a bool", plan(cp=True), "invalid_argument", ["cp is True", "integer"]),
    ("cp a float", plan(cp=2.0), "invalid_argument", ["cp is 2.0"]),
    ("cp huge", plan(cp=2**40), "invalid_argument", ["cp is 1099511627776"]),
    ("cp numpy bool", plan(cp=np.bool_(True)), "invalid_argument", ["integer"]),
    ("cp zero", plan(cp=0), "invalid_argument", ["cp_size is 0"]),
    ("cp negative", plan(cp=-3), "invalid_argument", ["-3"]),
    ("tokens NaN", plan(doc_lengths=None, tokens=float("nan")), "invalid_argument",
     ["tokens is nan"]),
    ("tokens a string", plan(doc_lengths=None, tokens="128"), "invalid_argument",
     ["tokens is '128'"]),
    ("tokens beyond int64", plan(doc_lengths=None, tokens=2**70), "invalid_argument",
     ["tokens is", "range"]),
    ("no row", plan(doc_lengths=None), "invalid_argument", ["no row given"]),
    ("doc_lengths a string", plan(doc_lengths="100,28"), "invalid_argument",
     ["doc_lengths is '100,28'"]),
    ("doc_lengths a dict", plan(doc_lengths={1: 2}), "invalid_argument", ["doc_lengths"]),
    ("doc_lengths floats", plan(doc_lengths=[1.5, 2]), "invalid_argument", ["float64"]),
    ("doc_lengths NaN", plan(doc_lengths=[float("nan")]), "invalid_argument", ["float64"]),
    ("doc_lengths bools", plan(doc_lengths=[True, True]), "invalid_argument", ["bool"]),
    ("doc_lengths nested", plan(doc_lengths=[[1, 2], [3, 4]]), "invalid_argument",
     ["shape (2, 2)"]),
    ("doc_lengths ragged", plan(doc_lengths=[[1, 2], [3]]), "invalid_argument",
     ["doc_lengths"]),
    ("doc_lengths deep", plan(doc_lengths=nested(DEEP)), "invalid_argument", ["doc_lengths"]),
    ("doc_lengths beyond int64", plan(doc_lengths=[2**70]), "invalid_argument",
     ["doc_lengths"]),
    ("doc_lengths uint64 beyond int64", plan(doc_lengths=np.array([2**63], dtype=np.uint64)),
     "invalid_argument", ["beyond int64"]),
    ("doc_lengths negative", plan(doc_lengths=[-5, 133]), "invalid_argument", ["-5"]),
    ("doc_lengths zero", plan(doc_lengths=[0, 128]), "invalid_argument", ["0"]),
    ("doc_lengths empty", plan(doc_lengths=[]), "invalid_argument", ["empty"]),
    ("doc_lengths a generator", plan(doc_lengths=(n for n in [100, 28])), "invalid_argument",
     ["doc_lengths"]),
    ("doc_lengths summing past N", plan(doc_lengths=[100, 28], tokens=64), "invalid_argument",
     ["64"]),
    ("block_size zero", plan(block_size=0), "invalid_argument", ["block"]),
    ("block_size a float", plan(block_size=128.0), "invalid_argument", ["block_size is 128.0"]),
    ("mask None", plan(mask=None), "invalid_argument", ["mask None is unknown"]),
    ("mask bytes", plan(mask=b"causal"), "invalid_argument", ["unknown"]),
    ("mask negative window", plan(mask="sliding:-1"), "invalid_argument", ["sliding"]),
    ("mask huge window", plan(mask="sliding:99999999999999999999999"), "invalid_argument",
     ["mask parameter"]),
    ("mask with underscores", plan(mask="sliding:1_0"), "invalid_argument", ["unknown"]),
    ("mask non-ASCII digits", plan(mask="sliding:\u0663"), "invalid_argument", ["unknown"]),
    ("strategy an int", plan(strategy=5), "invalid_argument", ["strategy is 5"]),
    ("strategy bytes", plan(strategy=b"auto"), "invalid_argument", ["strategy is 'auto'"]),
    ("strategy with NUL", plan(strategy="auto\0x"), "invalid_argument", ["NUL"]),
    ("strategy a lone surrogate", plan(strategy="\udcff"), "invalid_argument", ["UTF-8"]),
    ("strategy empty", plan(strategy=""), "invalid_argument", ["not a name"]),
    ("strategy unknown", plan(strategy="nope"), "not_found", ["'nope'"]),
    ("fallback an int", plan(fallback=3), "invalid_argument", ["fallback is 3"]),
    # partition_dp
    ("dp a bool", partition(dp=True), "invalid_argument", ["dp is True"]),
    ("dp zero", partition(dp=0), "invalid_argument", ["dp is 0"]),
    ("dp huge", partition(dp=2**31), "invalid_argument", ["dp is 2147483648"]),
    ("lengths empty", partition(lengths=[]), "invalid_argument", ["no samples"]),
    ("lengths floats", partition(lengths=[1.0, 2.0]), "invalid_argument", ["float64"]),
    ("lengths a string", partition(lengths="12"), "invalid_argument", ["lengths is '12'"]),
    ("lengths negative", partition(lengths=[-1, 5]), "invalid_argument", ["-1"]),
    ("lengths deep", partition(lengths=nested(DEEP)), "invalid_argument", ["lengths"]),
    ("cost None", partition(cost=None), "invalid_argument", ["unknown cost model None"]),
    ("cost NaN", partition(cost="attention:nan"), "invalid_argument",
     ["needs a number A >= 0"]),
    ("cost huge", partition(cost="attention:1e400"), "invalid_argument",
     ["needs a number A >= 0"]),
    ("cost with underscores", partition(cost="attention:1_0"), "invalid_argument",
     ["needs a number A >= 0"]),
    ("cost with a plus", partition(cost="attention:+1"), "invalid_argument",
     ["needs a number A >= 0"]),
    ("cost non-ASCII digits", partition(cost="attention:\u0663"), "invalid_argument",
     ["needs a number A >= 0"]),
    ("equal_count a string", partition(equal_count="yes"), "invalid_argument",
     ["equal_count is 'yes'"]),
    ("dp strategy bytes", partition(strategy=b"auto"), "invalid_argument", ["strategy is"]),
    # schedule
    ("world a bool", schedule(world=True), "invalid_argument", ["world is True"]),
    ("world zero", schedule(world=0), "invalid_argument", ["world is 0"]),
    ("budget NaN", schedule(max_tokens_per_rank=float("nan")), "invalid_argument",
     ["max_tokens_per_rank is nan"]),
    ("schedule docs zero", schedule(doc_lengths=[5, 0]), "invalid_argument", ["at least 1"]),
    ("schedule docs deep", schedule(doc_lengths=nested(DEEP)), "invalid_argument",
     ["doc_lengths"]),
    ("profile an int", schedule(profile=5), "invalid_argument", ["cost profile is 5"]),
    ("profile None", schedule(profile=None), "invalid_argument", ["not a path"]),
    ("profile unknown name", schedule(profile="h100"), "not_found",
     ["unknown cost profile 'h100'", "h100_7b, cpu_gloo"]),
    ("profile NaN", schedule(profile=dict(PROFILE, tile_seconds=float("nan"))),
     "invalid_argument", ["tile_seconds = nan is not finite"]),
    ("profile past an hour", schedule(profile=dict(PROFILE, slot_seconds=1e308)),
     "invalid_argument", ["slot_seconds = 1e+308 must be <= 3600"]),
    ("profile a huge int", schedule(profile=dict(PROFILE, tile_seconds=10**400)),
     "invalid_argument", ["tile_seconds = inf is not finite"]),
    ("profile bandwidth under 1", schedule(profile=dict(PROFILE, inter_node_bytes_per_second=0.5)),
     "invalid_argument", ["must be >= 1"]),
    ("profile K/V past 2^30", schedule(profile=dict(PROFILE, kv_bytes_per_token=2.0**31)),
     "invalid_argument", ["kv_bytes_per_token", "must be <="]),
    ("profile ranks_per_node huge", schedule(profile=dict(PROFILE, ranks_per_node=2**40)),
     "invalid_argument", ["ranks_per_node", "must be in [1,"]),
    ("profile ranks_per_node a float", schedule(profile=dict(PROFILE, ranks_per_node=8.0)),
     "invalid_argument", ["ranks_per_node is 8.0, not an integer"]),
    ("profile a bool", schedule(profile=dict(PROFILE, tile_seconds=True)),
     "invalid_argument", ["tile_seconds is True, not a number"]),
    ("profile a string", schedule(profile=dict(PROFILE, tile_seconds="1")),
     "invalid_argument", ["tile_seconds is '1', not a number"]),
    ("profile name surrogate", schedule(profile=dict(PROFILE, name="\udcff")),
     "invalid_argument", ["name must be"]),
    ("profile name NUL", schedule(profile=dict(PROFILE, name="a\0b")),
     "invalid_argument", ["name must be"]),
    ("profile name bytes", schedule(profile=dict(PROFILE, name=b"x")),
     "invalid_argument", ["name must be"]),
    ("profile unknown key", schedule(profile=dict(PROFILE, tile_secs=1)), "invalid_argument",
     ["unknown key 'tile_secs'"]),
    ("profile int key", schedule(profile={**PROFILE, 3: 1}), "invalid_argument",
     ["unknown key 3"]),
    ("schedule strategy bytes", lambda b: b.schedule(b"hybrid", world=2, max_tokens_per_rank=128,
                                                     doc_lengths=[10], profile=PROFILE),
     "invalid_argument", ["strategy is"]),
]


@pytest.mark.parametrize("what,call,code,words", CALL_CASES, ids=[c[0] for c in CALL_CASES])
def test_call_refusals(what, call, code, words, balancer):
    refused(lambda: call(balancer), code, words)


def test_rank_slots_takes_a_rank(balancer):
    sched = balancer.schedule("hybrid", world=4, max_tokens_per_rank=256, doc_lengths=[700, 90],
                              profile="cpu_gloo")
    assert sum(len(sched.rank_slots(r)) for r in range(4)) >= 1
    for rank in ("x", 4, -1, True, 1.0):
        refused(lambda: sched.rank_slots(rank), "invalid_argument", ["give a rank in [0, 4)"])


@pytest.mark.parametrize("profile", ["h100_7b", "cpu_gloo"])
def test_bundled_profile_names_work_as_in_the_cli(profile, balancer):
    by_name = balancer.schedule("hybrid", world=4, max_tokens_per_rank=256,
                                doc_lengths=[700, 90, 30, 200], profile=profile)
    by_value = balancer.schedule("hybrid", world=4, max_tokens_per_rank=256,
                                 doc_lengths=[700, 90, 30, 200],
                                 profile=CostProfile.bundled(profile))
    assert by_name.to_json()["slots"] == by_value.to_json()["slots"]


@pytest.mark.parametrize("name", ["h100_7b", "cpu_gloo"])
def test_bundled_profiles_are_the_clis(name, balancer, cli_path, tmp_path):
    """The package's copy of each bundled profile, written to a file, gives
    the CLI the same predictions as the CLI's own by name (every coefficient
    enters the busy times or the bytes; 16 ranks span two nodes of 8), and
    the package schedules by name as the CLI does."""
    from cli import run_json

    mapping = CostProfile.bundled(name).to_mapping()
    path = write(tmp_path, "bundled.yaml", "".join(f"{k}: {v!r}\n" if k != "name" else
                                                   f"{k}: {v}\n" for k, v in mapping.items()))
    args = ["schedule", "--world", 16, "--max-tokens-per-rank", 2048, "--lengths",
            "30000,900,5000,120,7000,333"]
    by_name = run_json(cli_path, *args, "--profile", name)
    by_file = run_json(cli_path, *args, "--profile", path)
    for answer in (by_name, by_file):
        answer.pop("plan_time_us")
    assert by_name == by_file
    ours = balancer.schedule("hybrid", world=16, max_tokens_per_rank=2048,
                             doc_lengths=[30000, 900, 5000, 120, 7000, 333], profile=name)
    mine = ours.to_json()["slots"]
    assert mine == [{k: theirs[k] for k in slot} for slot, theirs in zip(mine, by_name["slots"])]
    assert len(mine) == len(by_name["slots"])


def test_numpy_scalars_are_integers(balancer):
    p = balancer.plan_cp("auto", cp=np.int32(2), doc_lengths=np.array([100, 28], np.int16),
                         block_size=np.uint8(64))
    assert p.cp == 2 and p.tokens == 128
    part = balancer.partition_dp(np.array([5, 10, 20], dtype=np.uint32), np.int64(2),
                                 equal_count=np.bool_(False))
    assert sum(r.size for r in part.ranks) == 3


# -- profiles from files, split_samples, the torch adapters -------------------------------

def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def profile_text(**changes):
    mapping = dict(PROFILE, **changes)
    return "".join(f"{k}: {v}\n" for k, v in mapping.items())


FILE_CASES = [
    ("absent", lambda t: t / "absent.yaml", "not_found", ["not found", "h100_7b"]),
    ("a directory", lambda t: t, "invalid_argument", ["not a regular file"]),
    ("a device", lambda t: "/dev/zero", "invalid_argument", ["not a regular file"]),
    ("a FIFO", lambda t: (os.mkfifo(t / "fifo"), t / "fifo")[1], "invalid_argument",
     ["not a regular file"]),
    ("a /proc file", lambda t: "/proc/self/status", "invalid_argument",
     ["is a /proc or /sys file, not a file of data"]),
    ("a /sys file", lambda t: "/sys/kernel/mm/transparent_hugepage/enabled"
     if os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled") else "/proc/self/stat",
     "invalid_argument", ["is a /proc or /sys file"]),
    ("too big", lambda t: write(t, "big.yaml", b"#" * (64 * 1024 + 1)), "invalid_argument",
     ["65537 bytes, more than the 65536"]),
    ("a NUL byte", lambda t: write(t, "nul.yaml", "name: a\0b\n"), "invalid_argument",
     ["NUL byte"]),
    ("non-UTF-8 bytes", lambda t: write(t, "latin.yaml", b"name: caf\xe9\n"),
     "invalid_argument", ["cost profile"]),
    ("deep flow nesting", lambda t: write(t, "deep.yaml", "[" * 30000), "invalid_argument",
     ["cost profile"]),
    ("a duplicate key", lambda t: write(t, "dup.yaml", profile_text() + "tile_seconds: 1\n"),
     "invalid_argument", ["duplicate key 'tile_seconds'"]),
    ("empty", lambda t: write(t, "empty.yaml", "# nothing\n"), "invalid_argument", ["empty"]),
    ("two documents", lambda t: write(t, "two.yaml", profile_text() + "---\n" + profile_text()),
     "invalid_argument", ["2 YAML documents"]),
    ("a list", lambda t: write(t, "list.yaml", "- 1\n"), "invalid_argument",
     ["must be one YAML mapping"]),
    ("a nested value", lambda t: write(t, "nest.yaml", profile_text(tile_seconds="[1]")),
     "invalid_argument", ["must be one YAML mapping"]),
    ("underscores", lambda t: write(t, "under.yaml", profile_text(tile_seconds="1_0")),
     "invalid_argument", ["tile_seconds is '1_0', not a number"]),
    ("a YAML bool", lambda t: write(t, "bool.yaml", profile_text(tile_seconds="true")),
     "invalid_argument", ["tile_seconds is 'true', not a number"]),
    (".nan", lambda t: write(t, "nan.yaml", profile_text(token_seconds=".nan")),
     "invalid_argument", ["token_seconds = nan is not finite"]),
    ("1e400", lambda t: write(t, "huge.yaml", profile_text(token_seconds="1e400")),
     "invalid_argument", ["token_seconds = inf is not finite"]),
    ("ranks_per_node 8.0", lambda t: write(t, "rpn.yaml", profile_text(ranks_per_node="8.0")),
     "invalid_argument", ["ranks_per_node is '8.0', not an integer"]),
    ("an empty name", lambda t: write(t, "noname.yaml", profile_text(name="''")),
     "invalid_argument", ["name is empty"]),
    ("an alias bomb", lambda t: write(t, "bomb.yaml", "a: &a [x, x, x, x, x, x, x, x, x]\n" +
                                      "".join(f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
                                              for p, c in zip("abcdefgh", "bcdefghi"))),
     "invalid_argument", ["cost profile"]),
]


@pytest.mark.parametrize("what,path,code,words", FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_profile_file_refusals(what, path, code, words, tmp_path):
    target = path(tmp_path)
    refused(lambda: CostProfile.load(target), code, words)


def test_profile_files_the_cli_reads_alike(cli_path, tmp_path):
    """Each file of the table above, and a few good ones: the CLI accepts
    exactly the ones the package accepts."""
    from cli import run

    texts = {
        "good": profile_text(), "exponent": profile_text(intra_node_bytes_per_second="3.3e9"),
        "integer coefficient": profile_text(kv_bytes_per_token="512"),
        "leading dot": profile_text(token_seconds=".5"),
        "duplicate": profile_text() + "tile_seconds: 1\n",
        "underscores": profile_text(tile_seconds="1_0"),
        "bool": profile_text(tile_seconds="true"),
        "nan": profile_text(token_seconds=".nan"),
        "past an hour": profile_text(slot_seconds="4000"),
        "bandwidth 0.5": profile_text(inter_node_bytes_per_second="0.5"),
        "ranks_per_node 8.0": profile_text(ranks_per_node="8.0"),
        "ranks_per_node 2^21": profile_text(ranks_per_node=str(2**21)),
        "list": "- 1\n", "empty": "# c\n",
    }
    for name, text in texts.items():
        path = write(tmp_path, "p.yaml", text)
        code, _, stderr = run(cli_path, "schedule", "--world", 2, "--max-tokens-per-rank", 128,
                              "--lengths", "100,20", "--profile", path)
        try:
            CostProfile.load(path)
            python_ok = True
        except FulcrumError:
            python_ok = False
        assert (code == 0) == python_ok, (name, code, stderr)


def test_split_samples_refusals(balancer):
    from fulcrum.dp import split_samples

    refused(lambda: split_samples(balancer, 5, 2), "invalid_argument", ["samples is 5"])
    refused(lambda: split_samples(balancer, [1, 2], 2), "invalid_argument",
            ["sample 0 is 1, which has no len()"])
    refused(lambda: split_samples(balancer, ["ab", "c"], 2, lengths=[2]), "invalid_argument",
            ["2 samples but lengths"])
    refused(lambda: split_samples(balancer, ["ab", "c"], 2, lengths=5), "invalid_argument",
            ["2 samples but lengths is 5"])
    refused(lambda: split_samples(balancer, ["ab"], None), "invalid_argument", ["dp_size"])
    refused(lambda: split_samples(balancer, ["ab"], True), "invalid_argument", ["dp is True"])


def test_torch_adapter_refusals(balancer):
    torch = pytest.importorskip("torch", reason="python3-torch is not installed")
    from fulcrum import torch_cp

    refused(lambda: torch_cp.rearrange_indices([5]), "invalid_argument", ["not a CpPlan"])
    refused(lambda: torch_cp.rearrange_indices("plan"), "invalid_argument", ["not a CpPlan"])
    refused(lambda: torch_cp.pad_sequence([1, 2], 5), "invalid_argument", ["torch.Tensor"])
    x = torch.zeros(1, 4)
    refused(lambda: torch_cp.pad_sequence(x, True), "invalid_argument", ["length is True"])
    refused(lambda: torch_cp.pad_sequence(x, 8.0), "invalid_argument", ["length is 8.0"])
    refused(lambda: torch_cp.pad_sequence(x, 8, seq_dim=5), "invalid_argument", ["seq_dim is 5"])
    refused(lambda: torch_cp.pad_sequence(x, 2**50), "invalid_argument", ["length is"])
    refused(lambda: torch_cp.pad_sequence(x, 2), "invalid_argument", ["more than the length"])
    refused(lambda: torch_cp.FulcrumLoadBalancer(balancer, 2, doc_lengths=5), "invalid_argument",
            ["doc_lengths is 5"])
    lb = torch_cp.FulcrumLoadBalancer(balancer, 2, doc_lengths=torch.tensor([100, 28]))
    assert lb.padded_length >= 128
    lb = torch_cp.FulcrumLoadBalancer(balancer, 2, doc_lengths=np.array([100, 28]))
    assert lb.padded_length >= 128


# -- python3 -m fulcrum.plot ---------------------------------------------------------------

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
    ("seed negative", lambda t: ["plan", "--cp", "2", "--seq-len", "64", "--random-docs", "-1",
                                 "--out", str(t / "o")], ["--synthetic-docs must be an integer"]),
    ("random-docs alone", lambda t: ["plan", "--cp", "2", "--doc-lengths", "5", "--random-docs",
                                     "1", "--out", str(t / "o")],
     ["--synthetic-docs needs --seq-len"]),
    ("no row", lambda t: ["plan", "--cp", "2", "--out", str(t / "o")], ["no row given"]),
    ("two rows", lambda t: ["plan", "--cp", "2", "--seq-len", "64", "--doc-lengths", "64",
                            "--out", str(t / "o")], ["more than one row given"]),
    ("block-size zero", lambda t: ["plan", "--cp", "2", "--seq-len", "64", "--block-size", "0",
                                   "--out", str(t / "o")], ["--block-size must be an integer"]),
    ("dpi zero", lambda t: ["plan", "--cp", "2", "--seq-len", "64", "--dpi", "0",
                            "--out", str(t / "o")], ["--dpi must be an integer"]),
    ("dpi huge", lambda t: ["plan", "--cp", "2", "--seq-len", "64", "--dpi", str(10**6),
                            "--out", str(t / "o")], ["--dpi must be an integer"]),
    ("formats jpg", lambda t: ["plan", "--cp", "2", "--seq-len", "64", "--formats", "jpg",
                               "--out", str(t / "o")], ["--formats 'jpg'"]),
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
    ("plugin empty", lambda t: ["plan", "--cp", "2", "--seq-len", "64", "--plugin", "",
                                "--out", str(t / "o")], ["empty plugin name"]),
    ("mask unknown", lambda t: ["plan", "--cp", "2", "--seq-len", "64", "--mask", "diagonal",
                                "--out", str(t / "o")], ["mask 'diagonal' is unknown"]),
    ("strategy unknown", lambda t: ["plan", "--cp", "2", "--seq-len", "64", "--strategy", "nope",
                                    "--out", str(t / "o")], ["'nope'"]),
    ("unknown option", lambda t: ["plan", "--cp", "2", "--seq-len", "64", "--bogus", "--out",
                                  str(t / "o")], ["unrecognized arguments: --bogus"]),
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
    ("file deep", lambda t: ["plan", "--cp", "2", "--doc-lengths-file",
                             str(lengths_file(t, "[" * DEEP)), "--out", str(t / "o")],
     ["nests lists or objects more than 64 deep at byte 64"]),
    ("file floats", lambda t: ["plan", "--cp", "2", "--doc-lengths-file",
                               str(lengths_file(t, "[3.0]")), "--out", str(t / "o")],
     ["item 1 is '3.0', not a positive integer"]),
    ("file bools", lambda t: ["plan", "--cp", "2", "--doc-lengths-file",
                              str(lengths_file(t, "[true]")), "--out", str(t / "o")],
     ["item 1 is 'true'"]),
    ("file NaN", lambda t: ["plan", "--cp", "2", "--doc-lengths-file",
                            str(lengths_file(t, "[NaN]")), "--out", str(t / "o")],
     ["is not valid JSON (NaN is not a JSON number)"]),
    ("file past int64", lambda t: ["plan", "--cp", "2", "--doc-lengths-file",
                                   str(lengths_file(t, f"[{2**64}]")), "--out", str(t / "o")],
     ["item 1 is"]),
    ("file 1e400", lambda t: ["plan", "--cp", "2", "--doc-lengths-file",
                              str(lengths_file(t, "[1e400]")), "--out", str(t / "o")],
     ["item 1 is"]),
    ("file of many digits", lambda t: ["plan", "--cp", "2", "--doc-lengths-file",
                                       str(lengths_file(t, "[" + "9" * 5000 + "]")), "--out",
                                       str(t / "o")], ["number out of range"]),
    ("file not UTF-8", lambda t: ["plan", "--cp", "2", "--doc-lengths-file",
                                  str(lengths_file(t, b"[1, \xff]")), "--out", str(t / "o")],
     ["is not valid JSON at byte 4"]),
    ("file an object", lambda t: ["plan", "--cp", "2", "--doc-lengths-file",
                                  str(lengths_file(t, "{}")), "--out", str(t / "o")],
     ["holds a JSON object, not a list"]),
    ("file empty list", lambda t: ["plan", "--cp", "2", "--doc-lengths-file",
                                   str(lengths_file(t, "[]")), "--out", str(t / "o")],
     ["holds an empty list"]),
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


def test_shown_keeps_messages_one_line():
    assert _input_file.shown("a\nb") == "'a b'"
    assert _input_file.shown(b"\xff") == "'\\xff'"
    assert _input_file.shown("\udcff") == "'\\xff'"         # a file name's byte 0xff
    assert _input_file.shown("\ud800") == "'\\ud800'"
    assert _input_file.shown("x" * 500).endswith("...'")
