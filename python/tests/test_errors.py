"""Every way a load or a call can fail ends in one FulcrumError, one line,
naming the cause."""

import shutil
import threading

import numpy as np
import pytest

import fulcrum
import plugin_doubles
from fulcrum import _abi


def refused(call, code, *words):
    with pytest.raises(fulcrum.FulcrumError) as caught:
        call()
    error = caught.value
    assert error.code == code, str(error)
    assert "\n" not in str(error)
    for word in words:
        assert word in str(error), str(error)
    return error


# -- loading ------------------------------------------------------------------

def test_missing_plugin_by_path(tmp_path):
    refused(lambda: fulcrum.load(str(tmp_path / "libnothing.so")), "not_found",
            "does not exist", str(tmp_path))


def test_missing_plugin_by_name_lists_the_directories(tmp_path):
    refused(lambda: fulcrum.load("nothing", search_dirs=[str(tmp_path)]), "not_found",
            "libnothing.so", str(tmp_path), "FULCRUM_PLUGIN_PATH")


def test_plugin_found_by_name_in_search_dirs_and_env(plugin_path, monkeypatch):
    with fulcrum.load("fulcrum_balancer", search_dirs=["/nonexistent", str(plugin_path.parent)]) as b:
        assert b.name == "fulcrum" and b.path == str(plugin_path.resolve())
    monkeypatch.setenv("FULCRUM_PLUGIN_PATH", f"/nonexistent:{plugin_path.parent}")
    assert fulcrum.default_search_dirs()[:2] == ["/nonexistent", str(plugin_path.parent)]
    with fulcrum.load() as b:
        assert b.cp_strategies and b.dp_strategies


def test_directory_is_not_a_plugin(tmp_path):
    (tmp_path / "libdir.so").mkdir()
    refused(lambda: fulcrum.load(str(tmp_path / "libdir.so")), "invalid_argument",
            "not a regular file")


@pytest.mark.parametrize("which", ["file", "directory"])
def test_group_writable_plugin_is_refused(which, plugin_path, tmp_path):
    home = tmp_path / "plugins"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    copy = home / "libcopy.so"
    shutil.copy(plugin_path, copy)
    copy.chmod(0o755)
    with fulcrum.load(str(copy)) as b:  # the same file with safe modes loads
        assert b.name == "fulcrum"
    target = copy if which == "file" else home
    target.chmod(0o775)
    refused(lambda: fulcrum.load(str(copy)), "permission", "0775", f"chmod go-w {target}")
    with fulcrum.load(str(copy), check_permissions=False) as b:
        assert b.name == "fulcrum"


def test_not_a_shared_library(tmp_path):
    fake = tmp_path / "libfake.so"
    fake.write_text("not an ELF file")
    fake.chmod(0o644)
    # Refused before dlopen, as the host refuses it: dlopen of a file cut
    # short would fault instead of failing.
    refused(lambda: fulcrum.load(str(fake)), "invalid_argument", "not a complete shared library",
            "no ELF header")


@pytest.mark.parametrize("kind,words", [
    ("wrong_major", ["ABI major 2", "this package speaks 1"]),
    ("short_table", ["smaller than the", f"{_abi.TABLE_V1_SIZE} bytes of ABI v1.0"]),
    ("null_pointer", ["required function 'plan_cp' is null"]),
])
def test_broken_tables_are_refused(kind, words, test_plugins):
    path = test_plugins / f"libfulcrum_broken_{kind}.so"
    refused(lambda: fulcrum.load(str(path)), "internal", str(path), *words)


def test_throwing_plugin_becomes_an_error_with_its_message(test_plugins):
    with fulcrum.load(str(test_plugins / "libfulcrum_broken_throwing.so")) as b:
        refused(lambda: b.plan_cp(b.cp_strategies[0], cp=2, tokens=8), "internal", "exception")
        refused(lambda: b.partition_dp([1, 2, 3], 2, b.dp_strategies[0]), "internal", "exception")


def test_invalid_answers_are_refused_and_the_plan_still_released(test_plugins):
    with fulcrum.load(str(test_plugins / "libfulcrum_broken_non_permutation.so")) as b:
        counter = ReleaseCounter(b)
        refused(lambda: b.plan_cp(b.cp_strategies[0], cp=2, tokens=8), "internal",
                "invalid plan", "not a permutation")
        assert counter.released == counter.planned == 1
        refused(lambda: b.partition_dp([1, 2, 3, 4], 2, b.dp_strategies[0]), "internal",
                "invalid partition")


# -- lifetimes and threads ----------------------------------------------------

class ReleaseCounter:
    """Wraps a balancer's table to count successful plan_cp calls and releases."""

    def __init__(self, balancer):
        table = balancer._table
        self.planned = self.released = 0

        def plan_cp(*args):
            status = table.plan_cp(*args)
            self.planned += status == _abi.OK
            return status

        def release_plan(*args):
            self.released += 1
            return table.release_plan(*args)

        balancer._table = plugin_doubles.TableWith(table, plan_cp=plan_cp,
                                                   release_plan=release_plan)


def test_release_plan_exactly_once_per_ok_plan(plugin_path):
    with fulcrum.load(str(plugin_path)) as b:
        counter = ReleaseCounter(b)
        for strategy in b.cp_strategies:
            b.plan_cp(strategy, cp=3, tokens=1000, block_size=16)
        b.plan_cp("head_tail", cp=3, tokens=1001)  # unsupported, then the fallback
        refused(lambda: b.plan_cp("head_tail", cp=3, tokens=1001, fallback=None), "unsupported",
                "head_tail cannot shard this row")
        refused(lambda: b.plan_cp("nope", cp=3, tokens=10), "not_found", "'nope'")
        assert counter.planned == len(b.cp_strategies) + 1
        assert counter.released == counter.planned


def test_closed_balancer_refuses_calls(plugin_path):
    b = fulcrum.load(str(plugin_path))
    b.close()
    b.close()  # twice is harmless
    refused(lambda: b.plan_cp("auto", cp=2, tokens=8), "invalid_argument", "closed")


def test_one_balancer_from_many_threads(balancer):
    rows = [dict(cp=4, doc_lengths=[int(x) for x in np.random.default_rng(i).integers(1, 900, 5)])
            for i in range(8)]
    serial = [balancer.plan_cp("auto", **row).positions for row in rows]
    results = {}

    def work(i):
        for _ in range(20):
            results[i] = balancer.plan_cp("auto", **rows[i]).positions

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all((results[i] == serial[i]).all() for i in range(8))


# -- bad arguments ------------------------------------------------------------

@pytest.mark.parametrize("kwargs,code,words", [
    (dict(cp=0, tokens=8), "invalid_argument", ["cp_size is 0"]),
    (dict(cp=2, tokens=0), "invalid_argument", ["0 tokens"]),
    (dict(cp=2, tokens=2**32), "invalid_argument", ["2^31"]),
    (dict(cp=2, tokens=8, block_size=0), "invalid_argument", ["block_size is 0"]),
    (dict(cp=2**40, tokens=8), "invalid_argument", ["cp is 1099511627776", "C ABI"]),
    (dict(cp=1.5, tokens=8), "invalid_argument", ["must be an integer"]),
    (dict(cp=True, tokens=8), "invalid_argument", ["must be an integer"]),
    (dict(cp=2), "invalid_argument", ["no row given"]),
    (dict(cp=2, tokens=9, doc_lengths=[4, 4]), "invalid_argument", ["sum to 8", "9 tokens"]),
    (dict(cp=2, doc_lengths=[4, 0]), "invalid_argument", ["document 1 has length 0"]),
    (dict(cp=2, doc_lengths=[]), "invalid_argument", ["doc_lengths is empty"]),
    (dict(cp=2, doc_lengths=[1.5, 2]), "invalid_argument", ["give integers"]),
    (dict(cp=2, tokens=8, mask="diagonal"), "invalid_argument", ["mask 'diagonal'"]),
    (dict(cp=2, tokens=8, mask="sliding:0"), "invalid_argument", ["sliding window is 0"]),
    (dict(cp=2, tokens=8, mask="sliding:x"), "invalid_argument", ["mask 'sliding:x'"]),
])
def test_bad_cp_arguments(kwargs, code, words, balancer):
    refused(lambda: balancer.plan_cp("auto", **kwargs), code, *words)


@pytest.mark.parametrize("args,kwargs,code,words", [
    (([1, 2], 0), {}, "invalid_argument", ["dp is 0"]),
    (([], 2), {}, "invalid_argument", ["no samples"]),
    (([1, 0, 3], 2), {}, "invalid_argument", ["lengths[1] is 0"]),
    (([1, 2], 2), dict(cost="flops"), "invalid_argument", ["unknown cost model 'flops'"]),
    (([1, 2], 2), dict(cost="attention:-1"), "invalid_argument", ["A >= 0"]),
    (([1, 2], 2, "nope"), {}, "not_found", ["'nope'"]),
])
def test_bad_dp_arguments(args, kwargs, code, words, balancer):
    refused(lambda: balancer.partition_dp(*args, **kwargs), code, *words)


# -- ABI evolution ------------------------------------------------------------

def test_table_layout_is_the_v1_header(plugin_path):
    # struct_size u32, abi u16 x2, name, cp list, two counts, dp list, six functions.
    assert _abi.TABLE_HEADER_SIZE == 8 and _abi.TABLE_V1_SIZE == 88
    with fulcrum.load(str(plugin_path)) as b:
        assert b._table.struct_size >= _abi.TABLE_V1_SIZE
        assert b.abi_version[0] == _abi.ABI_MAJOR


def test_a_newer_minor_table_is_accepted_and_its_extra_fields_unread(plugin_path):
    import ctypes

    from fulcrum import balancer as balancer_module
    from fulcrum import loader as loader_module

    real = fulcrum.load(str(plugin_path))
    size = _abi.TABLE_V1_SIZE
    # The v1.0 table followed by a field a 1.1 plugin would append, here garbage.
    newer = (ctypes.c_char * (size + 8))()
    ctypes.memmove(newer, ctypes.addressof(real._table), size)
    ctypes.memset(ctypes.addressof(newer) + size, 0xAB, 8)
    header = _abi.TableHeader.from_buffer(newer)
    header.struct_size, header.abi_minor = size + 8, _abi.ABI_MINOR + 1
    assert _abi.table_has(header.struct_size, _abi.PluginTableV1, "last_error")
    table = loader_module._check_table(ctypes.addressof(newer), "newer.so")
    with balancer_module.Balancer(real._library, table, "newer.so") as b:
        assert b.abi_version == (_abi.ABI_MAJOR, _abi.ABI_MINOR + 1)
        assert b.plan_cp("auto", cp=2, tokens=64).tokens == 64
    real.close()


def corrupt(field, value):
    def apply(plan):
        if field == "first_position":
            plan.positions[0] = value
        else:
            setattr(plan, field, value)
    return apply


@pytest.mark.parametrize("damage,words", [
    (corrupt("cp_size", 3), ["cp_size 3, the request has 2"]),
    (corrupt("shard_len", -1), ["shard_len -1 is out of range"]),
    (corrupt("shard_len", 2), ["2 shards of 2 positions cannot hold 8 tokens"]),
    (corrupt("shard_len", 2**61), ["shard_len 2305843009213693952 is out of range [0, 576]"]),
    (corrupt("positions", None), ["positions is null"]),
    (corrupt("padding", 1), ["hold 0 pads for 8 tokens, but it reports padding 1"]),
    (corrupt("first_position", 8), ["outside [-1, 8)"]),
    (corrupt("first_position", 5), ["not a permutation"]),
])
def test_an_invalid_plan_is_refused_and_released(damage, words, plugin_path):
    with fulcrum.load(str(plugin_path)) as b:
        counter = ReleaseCounter(b)
        b._table = plugin_doubles.altered_plans(b._table, damage)
        refused(lambda: b.plan_cp("contiguous", cp=2, tokens=8, block_size=2), "internal",
                "plugin 'fulcrum' strategy 'contiguous' returned an invalid plan", *words)
        assert counter.planned == counter.released == 1
