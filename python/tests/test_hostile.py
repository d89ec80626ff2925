"""Hostile arguments and files for every public function: each refusal is
one FulcrumError with the C++ side's words where it has them, and never a
TypeError, UnicodeError, RecursionError, OverflowError or a hang. One table
per surface; a row is (what, call, code, words the message must hold). The
`python3 -m fulcrum.plot` commands' are in test_hostile_plot.py."""

import os
import shutil

import numpy as np
import pytest

import fulcrum
from fulcrum import FulcrumError, _input_file
from fulcrum.schedule import CostProfile
from hostile_inputs import DEEP, nested, refused, write

PROFILE = CostProfile.bundled("cpu_gloo").to_mapping()


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

def profile_text(**changes):
    mapping = dict(PROFILE, **changes)
    return "".join(f"{k}: {v}\n" for k, v in mapping.items())


def field_case(what, words, **changes):
    """A FILE_CASES row: the bundled profile with fields changed (YAML text)."""
    return (what, lambda t: write(t, "profile.yaml", profile_text(**changes)),
            "invalid_argument", words)


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
    field_case("a nested value", ["must be one YAML mapping"], tile_seconds="[1]"),
    field_case("underscores", ["tile_seconds is '1_0', not a number"], tile_seconds="1_0"),
    field_case("a YAML bool", ["tile_seconds is 'true', not a number"], tile_seconds="true"),
    field_case(".nan", ["token_seconds = nan is not finite"], token_seconds=".nan"),
    field_case("1e400", ["token_seconds = inf is not finite"], token_seconds="1e400"),
    field_case("ranks_per_node 8.0", ["ranks_per_node is '8.0', not an integer"],
               ranks_per_node="8.0"),
    field_case("an empty name", ["name is empty"], name="''"),
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




def test_shown_keeps_messages_one_line():
    assert _input_file.shown("a\nb") == "'a b'"
    assert _input_file.shown(b"\xff") == "'\\xff'"
    assert _input_file.shown("\udcff") == "'\\xff'"         # a file name's byte 0xff
    assert _input_file.shown("\ud800") == "'\\ud800'"
    assert _input_file.shown("x" * 500).endswith("...'")
