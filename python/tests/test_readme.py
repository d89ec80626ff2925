"""Every command in README.md and docs/GUIDE.md runs as written, in order,
as a person copies them into one terminal after the README's main command.

The README's ```sh and ```python blocks are read with test_docs.py's
extraction and its `<!-- not run by test_docs: REASON -->` marker. The first
two blocks are not run here: the first is the main command, which
integration_tests/readme_main_command.sh runs in a fresh clone, and the
second builds and runs every test, which is CI itself. Every other block (and
every block of docs/GUIDE.md) runs
in one bash session (so an `export` in one block holds in the next, as in a
terminal), with `bash -e -o pipefail`; a Python block runs as `PYTHONPATH=python
python3 BLOCK`, as the README says. The session's working directory is a
scratch copy of the checkout's root (its tracked entries and build/ linked),
so the files the commands write (checkpoints, metrics) land there and not in
the checkout. HOME is fresh and PATH is the test's own: `fulcrum` is
reachable only as the README makes it.

ctest runs this file as `readme_commands` (its own test: it trains, so it is
too slow for python_package); by hand, after `cmake --build --preset release`:
    python3 -m pytest -q python/tests/test_readme.py
"""

import pathlib
import re
import subprocess
import sys

import pytest

from test_docs import RUN_LANGUAGES, doc_blocks, environment

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "GUIDE.md"
BUILD = ROOT / "build" / "release"
RUN_ELSEWHERE = 2  # the main command and the test command, see the docstring
MARK = "@@ fulcrum block at line "

BLOCKS = doc_blocks(README)
RUNNABLE = [b for b in BLOCKS if b[1] in RUN_LANGUAGES]
GUIDE_RUNNABLE = [b for b in doc_blocks(GUIDE) if b[1] in RUN_LANGUAGES]
# What each page's session runs: its runnable blocks, less those run elsewhere.
SESSIONS = {"README.md": RUNNABLE[RUN_ELSEWHERE:], "docs/GUIDE.md": GUIDE_RUNNABLE}


def test_the_readme_has_its_commands():
    """The extraction finds the README's blocks, the two run elsewhere are the
    ones meant, and the rest hold the commands the README teaches (a regex
    gone wrong would otherwise make the run below pass on nothing)."""
    assert len(RUNNABLE) >= RUN_ELSEWHERE + 3, [b[:2] for b in BLOCKS]
    main, tests = RUNNABLE[0][2], RUNNABLE[1][2]
    assert "cmake --build --preset main" in main and "fulcrum train --config" in main, main
    assert "cmake --workflow --preset release" in tests, tests
    rest = "\n".join(b[2] for b in RUNNABLE[RUN_ELSEWHERE:] if b[3] is None)
    for command in ("fulcrum plan ", "fulcrum dp-partition ", "fulcrum schedule ",
                    "fulcrum train ", "--resume auto", "import fulcrum"):
        assert command in rest, command
    assert all(b[1] for b in BLOCKS), [b[0] for b in BLOCKS if not b[1]]
    not_run = [b for b in RUNNABLE[RUN_ELSEWHERE:] if b[3] is not None]
    assert len(not_run) <= 2, [(b[0], b[3]) for b in not_run]


def test_the_guide_has_its_commands():
    assert all(b[3] is None for b in GUIDE_RUNNABLE), "docs/GUIDE.md runs every block"
    text = "\n".join(b[2] for b in GUIDE_RUNNABLE)
    for command in ("export PATH=", "fulcrum plan ", "fulcrum dp-partition ",
                    "fulcrum schedule ", "data.source=jsonl", "import fulcrum"):
        assert command in text, command


@pytest.mark.parametrize("page", SESSIONS)
def test_the_page_names_no_file_it_does_not_ship(page):
    """A `--...-file X` or `--config X` argument of a command is a file of the
    checkout, so the first copy and paste cannot fail on a missing input."""
    text = "\n".join(b[2] for b in SESSIONS[page])
    named = re.findall(r"--(?:[a-z-]+-file|config)[ =](\S+)", text)
    assert named, text
    for path in named:
        assert (ROOT / path).is_file(), f"{page} names {path}, which is not in the checkout"


def scratch_root(tmp_path):
    """The checkout's root as the README's commands see it: its tracked
    top-level entries and build/ linked into an empty directory."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True)
    if listed.returncode == 0:
        names = {p.split("/", 1)[0] for p in listed.stdout.decode().split("\0") if p}
    else:  # not a git checkout: every entry but the hidden ones
        names = {p.name for p in ROOT.iterdir() if not p.name.startswith(".")}
    names.add("build")
    root = tmp_path / "checkout"
    root.mkdir()
    for name in sorted(names):
        if (ROOT / name).exists():
            (root / name).symlink_to(ROOT / name)
    return root


def main_command_outputs():
    """The steps of the README's main command after its build (the data it
    prepares, such as `fulcrum preprocess`), which the later commands use:
    a person runs them first."""
    first = RUNNABLE[0][2]
    steps = [step.strip() for step in first.split("&&")]
    return [s for s in steps if " preprocess " in s]


def session_script(blocks, tmp_path, prelude=()):
    lines = ["set -e -o pipefail", *prelude]
    for line, language, body, reason in blocks:
        if reason is not None:
            continue
        lines.append(f"echo '{MARK}{line}'")
        if language == "python":
            script = tmp_path / f"readme_{line}.py"
            script.write_text(body, encoding="utf-8")
            lines.append(f"PYTHONPATH=python python3 {script}")
        else:
            lines.append(body)
    lines.append(f"echo '{MARK}end'")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("page", SESSIONS)
def test_every_command_runs_in_order(page, tmp_path):
    for needed in (BUILD / "bin" / "fulcrum", BUILD / "bin" / "fulcrum-worker",
                   BUILD / "lib" / "fulcrum" / "libfulcrum_balancer.so"):
        if not needed.exists():
            pytest.skip(f"the README's commands use its build and {needed} is absent; build it "
                        "with cmake --preset release && cmake --build --preset release")
    blocks = SESSIONS[page]
    if any("torch" in b[2] for b in blocks):
        pytest.importorskip("torch", reason=f"a block of {page} needs python3-torch")
    home = tmp_path / "home"
    home.mkdir()
    env = environment(home)
    root = scratch_root(tmp_path)
    script = session_script(blocks, tmp_path, main_command_outputs())
    done = subprocess.run(["bash", "-c", script], cwd=root, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=840)
    ran = re.findall(re.escape(MARK) + r"(\S+)", done.stdout)
    failed_at = ran[-1] if ran else "?"
    assert done.returncode == 0 and ran and ran[-1] == "end", (
        f"{page}'s block at line {failed_at} failed (exit {done.returncode}); the "
        f"session's last output:\n{done.stdout[-4000:]}")
    expected = [str(b[0]) for b in blocks if b[3] is None] + ["end"]
    assert ran == expected
