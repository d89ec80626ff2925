"""The plugin as a trust boundary, from Python: the caller's arrays are never
what the plugin reads (it gets private copies, compared after the call),
counts and text from the plugin are checked before use, and the plugin file
and the directories above it must belong to root or this user. The broken
fixtures are the host tests' (plugin/tests/broken)."""

import os
import shutil

import numpy as np
import pytest

import fulcrum
from test_schedule import PROFILE

NOBODY = 65534


def refused(call, code, *words):
    with pytest.raises(fulcrum.FulcrumError) as caught:
        call()
    text = str(caught.value)
    assert caught.value.code == code, text
    for word in words:
        assert word in text, text
    return text


def printable(text):
    """One line of UTF-8 without C0 controls or DEL (str is already Unicode)."""
    return all(ord(c) >= 0x20 and ord(c) != 0x7f for c in text)


def broken(test_plugins, kind):
    path = test_plugins / f"libfulcrum_broken_{kind}.so"
    assert path.exists(), f"{path} is missing: build fulcrum_broken_{kind}"
    return str(path)


# -- memory lent to the plugin -------------------------------------------------

def test_a_plan_that_wrote_into_the_row_is_refused_and_the_array_kept(test_plugins):
    path = broken(test_plugins, "scribble")
    docs = np.array([2000, 1500, 1000], dtype=np.int64)
    with fulcrum.load(path, check_permissions=False) as b:
        refused(lambda: b.plan_cp("contiguous", cp=4, doc_lengths=docs), "internal",
                "plugin 'broken_scribble' strategy 'contiguous' wrote into doc_lengths[0] "
                "(2000 lent, 1999 after the call)", path)
        assert docs.tolist() == [2000, 1500, 1000]
        # One document: the strategy name it is lent is what it writes into.
        refused(lambda: b.plan_cp("contiguous", cp=2, tokens=100), "internal",
                "wrote into the string strategy")


def test_a_partition_that_wrote_into_the_lengths_is_refused_and_the_array_kept(test_plugins):
    lengths = np.array([40, 30, 20, 10, 5], dtype=np.int64)
    with fulcrum.load(broken(test_plugins, "scribble"), check_permissions=False) as b:
        refused(lambda: b.partition_dp(lengths, 2, "round_robin"), "internal",
                "wrote into lengths[0] (40 lent, 1 after the call)")
    assert lengths.tolist() == [40, 30, 20, 10, 5]


def test_a_schedule_of_a_shrunken_batch_is_refused_and_the_batch_kept(test_plugins):
    docs = np.array([2500, 1800, 200], dtype=np.int64)
    with fulcrum.load(broken(test_plugins, "scribble"), check_permissions=False) as b:
        refused(lambda: b.schedule("hybrid", world=4, max_tokens_per_rank=1000,
                                   doc_lengths=docs, profile=PROFILE),
                "internal", "plugin 'broken_scribble' scheduler 'hybrid' wrote into "
                "doc_lengths[0] (2500 lent, 1 after the call)")
    assert docs.tolist() == [2500, 1800, 200]


def test_a_plugin_that_wrote_into_a_request_struct_is_refused(test_plugins):
    """Each hook writes one field of the request struct (no array, no
    string) and answers validly: only the byte comparison can tell, and the
    words are the C++ host's."""
    path = broken(test_plugins, "scribble_struct")
    docs = np.array([700, 500, 200], dtype=np.int64)
    tail = "which the host lent it read-only"
    with fulcrum.load(path, check_permissions=False) as b:
        refused(lambda: b.plan_cp("contiguous", cp=4, doc_lengths=docs), "internal",
                "plugin 'broken_scribble_struct' strategy 'contiguous' wrote into the request "
                "struct fulcrum_cp_request, " + tail, path)
        refused(lambda: b.partition_dp(docs, 2, "round_robin", cost="attention:4"), "internal",
                "plugin 'broken_scribble_struct' strategy 'round_robin' wrote into the request "
                "struct fulcrum_dp_request, " + tail, path)
        refused(lambda: b.schedule("hybrid", world=4, max_tokens_per_rank=1000,
                                   doc_lengths=docs, profile=PROFILE), "internal",
                "plugin 'broken_scribble_struct' scheduler 'hybrid' wrote into the request "
                "struct fulcrum_schedule_request, " + tail, path)
    assert docs.tolist() == [700, 500, 200]


def test_the_real_plugin_leaves_every_array_as_given(balancer):
    """Property: over many rows, the caller's arrays are equal to their
    copies taken before each call (the plugin may not even see them)."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        docs = rng.integers(1, 900, size=rng.integers(1, 12))
        before = docs.copy()
        balancer.plan_cp("auto", cp=int(rng.integers(1, 9)), doc_lengths=docs)
        balancer.partition_dp(docs, int(rng.integers(1, 5)), "auto")
        assert np.array_equal(docs, before)


# -- counts that promise more than the buffers hold ---------------------------

def test_counts_are_checked_before_any_buffer_is_read(test_plugins):
    with fulcrum.load(broken(test_plugins, "lying_counts"), check_permissions=False) as b:
        refused(lambda: b.plan_cp("contiguous", cp=4, tokens=1000), "internal",
                "4 shards of 64000 positions hold 255000 pads for 1000 tokens, but it reports "
                "padding 0")
        refused(lambda: b.partition_dp([5, 4, 3, 2, 1], 3, "round_robin"), "internal",
                "invalid partition", "rank 3 starts before rank 2")
        # One rank: it writes sample n + 1 into the buffer of n.
        refused(lambda: b.partition_dp([5, 4, 3], 1, "round_robin"), "internal",
                "plugin 'broken_lying_counts' strategy 'round_robin' wrote past the end of "
                "samples (3 entries, written at entry 3)")


# -- text from the plugin --------------------------------------------------------

@pytest.mark.parametrize("strategy,words", [
    ("latin1", "strategy_used is not UTF-8 (byte 7 is 0xe9)"),
    ("newline", "strategy_used holds the control character U+000A at byte 10"),
    ("control_reason", "fallback_reason holds the control character U+001B at byte 4"),
])
def test_names_and_reasons_are_refused_unless_utf8_without_controls(strategy, words,
                                                                     test_plugins):
    path = broken(test_plugins, "bad_text")
    with fulcrum.load(path, check_permissions=False) as b:
        text = refused(lambda: b.plan_cp(strategy, cp=2, tokens=64), "internal",
                       f"plugin 'broken_bad_text' strategy '{strategy}' returned an invalid "
                       f"plan: {words}", path)
        assert printable(text)


def test_errors_and_log_lines_are_escaped_to_one_line(test_plugins, caplog):
    with fulcrum.load(broken(test_plugins, "bad_text"), check_permissions=False) as b:
        with caplog.at_level("WARNING", logger="fulcrum"):
            text = refused(lambda: b.plan_cp("noisy", cp=2, tokens=64), "internal",
                           "failed \\x1b[31mred\\x1b[0m\\nfulcrum: forged line \\xc3")
    assert printable(text)
    logged = [r.getMessage() for r in caplog.records]
    assert logged == ["plugin 'broken_bad_text': log \\x1b[2J line\\nsecond \\xff"]


def test_schedule_names_are_checked(test_plugins):
    with fulcrum.load(broken(test_plugins, "bad_text"), check_permissions=False) as b:
        refused(lambda: b.schedule("fixed", world=4, max_tokens_per_rank=1000,
                                   doc_lengths=[2500, 1800, 200], profile=PROFILE),
                "internal", "plugin 'broken_bad_text' scheduler 'fixed' returned an invalid "
                "schedule: strategy_used is not UTF-8 (byte 5 is 0xc3)")


def test_table_names_are_checked_at_load(test_plugins):
    path = broken(test_plugins, "bad_name")
    text = refused(lambda: fulcrum.load(path, check_permissions=False), "internal", path,
                   "its cp_strategies[1] holds the control character U+001B at byte 3")
    assert printable(text)


# -- who owns the file and the directories above it ----------------------------

@pytest.fixture
def owned_copy(plugin_path, tmp_path):
    """A copy of the plugin at tmp/p/libx.so (0755 / 0644), and its paths."""
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user (uid 65534) needs root; the mode rules are "
                    "tested without it")
    tmp_path.chmod(0o755)
    inner = tmp_path / "p"
    inner.mkdir(mode=0o755)
    copy = inner / "libx.so"
    shutil.copy(plugin_path, copy)
    copy.chmod(0o644)
    yield tmp_path, inner, copy
    for p in (tmp_path, inner, copy):
        os.lchown(p, 0, -1)


@pytest.mark.parametrize("which,what", [("file", "the file"), ("inner", "its directory"),
                                        ("top", "the directory on its path")])
def test_a_plugin_another_user_could_swap_is_refused(which, what, owned_copy):
    top, inner, copy = owned_copy
    with fulcrum.load(str(copy)) as b:
        assert b.name == "fulcrum"
    target = {"file": copy, "inner": inner, "top": top}[which]
    os.chown(target, NOBODY, -1)
    refused(lambda: fulcrum.load(str(copy)), "permission",
            f"{what} {target} is owned by uid {NOBODY}", "neither root nor this user")
    os.chown(target, 0, -1)
    with fulcrum.load(str(copy)) as b:
        assert b.name == "fulcrum"


def test_a_link_in_a_directory_of_another_user_is_refused(owned_copy):
    top, _, copy = owned_copy
    other = top / "other"
    other.mkdir(mode=0o755)
    link = other / "libx.so"
    link.symlink_to(copy)
    with fulcrum.load(str(link)) as b:
        assert b.name == "fulcrum"
    os.chown(other, NOBODY, -1)
    refused(lambda: fulcrum.load(str(link)), "permission", f"{other} is owned by uid {NOBODY}")
    os.chown(other, 0, -1)


# -- compact answers (ABI 1.4), adversarial --------------------------------------

COMPACT_ARGS = dict(world=8, max_tokens_per_rank=1000, doc_lengths=[2500, 1800, 900, 700, 400],
                    profile="h100_7b", cp=4)


@pytest.mark.parametrize("kind, compact_rank, says", [
    ("compact_unasked", None, "answer_flags 1 is not an answer this call asked for"),
    ("compact_unknown_bit", None, "answer_flags 4 is not an answer this call asked for"),
    ("compact_unknown_bit", 0, "answer_flags 5 is not an answer this call asked for"),
    ("compact_with_positions", 0, "a compact answer with positions"),
    ("compact_null_rule", 0, "slot 0's plan is by rule but names no rule"),
    ("compact_unknown_rule", 0, "slot 0 (CP rule 'no_such_rule' on 4 ranks) cannot be expanded"),
])
def test_a_compact_answer_the_host_must_not_take_is_refused(test_plugins, kind, compact_rank,
                                                            says):
    with fulcrum.load(broken(test_plugins, kind), check_permissions=False) as b:
        text = refused(lambda: b.schedule("fixed", **COMPACT_ARGS, compact_rank=compact_rank),
                       "internal", "plugin 'broken_compact' scheduler 'fixed'", says)
        assert printable(text)


def test_expand_slots_refuses_a_rank_outside_the_world_and_what_is_not_a_schedule(test_plugins):
    with fulcrum.load(broken(test_plugins, "compact_unknown_rule"),
                      check_permissions=False) as b:
        # Rank 7 is outside slot 0, whose rule cannot be expanded.
        schedule = b.schedule("fixed", **COMPACT_ARGS, compact_rank=7)
        assert schedule.slots[0].compact
        for rank in (-1, 8, 99, True, 1.0, "0"):
            refused(lambda: b.expand_slots(schedule, rank), "invalid_argument", "rank is ",
                    "give a rank in [0, 8)")
        refused(lambda: b.expand_slots("a schedule", 0), "invalid_argument",
                "fulcrum.schedule.Schedule")
        # Expanded with another mask or block size than the schedule was asked
        # with, a rule would plan another row: refused, not planned.
        for kwargs, says in (({"mask": "full"}, "mask"), ({"block_size": 64}, "block_size")):
            refused(lambda: b.expand_slots(schedule, 7, **kwargs), "invalid_argument", says,
                    "the schedule was asked with")
