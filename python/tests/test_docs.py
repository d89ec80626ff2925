"""Every command in docs/PYTHON.md runs as written.

Each ```sh and ```python block of the page is run from the checkout's root
against this checkout's release build (the README's build, which the page's
commands name): shell blocks with bash -e, Python blocks as
`PYTHONPATH=python python3 -c BLOCK`, as the page says. HOME is a fresh
directory, so `~/venv/...` lands there, and FULCRUM_PLUGIN_PATH is unset, so
`fulcrum.load()` has to find the plugin by itself. A block the page marks
`<!-- not run by test_docs: REASON -->` (the whole suite, this very test, a
write into the system Python) is only compiled when it is Python, and
reported as skipped with its reason.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "PYTHON.md"
BUILD_PLUGIN = ROOT / "build" / "release" / "lib" / "fulcrum" / "libfulcrum_balancer.so"
FENCE = re.compile(r"^```([A-Za-z]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
NOT_RUN = re.compile(r"<!-- not run by test_docs: (.+?) -->\s*$")
RUN_LANGUAGES = ("sh", "bash", "python")


def doc_blocks(doc=DOC):
    """(line, language, body, not-run reason or None) of every fenced block of
    a page, in order; test_readme.py reads README.md with it too."""
    text = doc.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        language, body = match.group(1), match.group(2)
        line = text.count("\n", 0, match.start()) + 1
        preceding = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        reason = NOT_RUN.search(preceding)
        found.append((line, language, body, reason.group(1) if reason else None))
    return found


BLOCKS = doc_blocks()


def test_the_page_has_its_commands():
    """The extraction finds the page's blocks (a regex gone wrong would find
    none and every other test here would pass vacuously)."""
    runnable = [b for b in BLOCKS if b[1] in RUN_LANGUAGES]
    assert len(runnable) >= 10, [b[:2] for b in BLOCKS]
    assert any("fulcrum.load()" in b[2] for b in runnable)
    assert any("python3 -m fulcrum.plot" in b[2] for b in runnable)
    # Every fenced block says what it is, so none escapes by having no language.
    assert all(b[1] for b in BLOCKS), [b[0] for b in BLOCKS if not b[1]]
    not_run = [b for b in runnable if b[3] is not None]
    assert len(not_run) <= 4, [(b[0], b[3]) for b in not_run]


@pytest.fixture(scope="module")
def checkout_build():
    if not BUILD_PLUGIN.is_file():
        pytest.skip(f"docs/PYTHON.md's commands use the README's build and {BUILD_PLUGIN} is "
                    "absent; build it with cmake --preset release && cmake --build --preset "
                    "release")
    return BUILD_PLUGIN


def environment(home):
    env = {k: v for k, v in os.environ.items()
           if k not in ("FULCRUM_PLUGIN_PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["HOME"] = str(home)
    # `python3` in a block is the interpreter running this test.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["MPLBACKEND"] = "Agg"
    env["PIP_NO_INDEX"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.mark.parametrize("line,language,body,reason",
                         [pytest.param(*b, id=f"line{b[0]}") for b in BLOCKS
                          if b[1] in RUN_LANGUAGES])
def test_block_runs_as_written(line, language, body, reason, checkout_build, tmp_path):
    if reason is not None:
        if language == "python":
            compile(body, f"docs/PYTHON.md:{line}", "exec")
        pytest.skip(f"docs/PYTHON.md:{line} is marked not run: {reason}")
    if "torch" in body:
        pytest.importorskip("torch", reason=f"docs/PYTHON.md:{line} needs python3-torch")
    if "~/venv" in body:
        made = subprocess.run([sys.executable, "-m", "venv", "--help"], capture_output=True)
        if made.returncode != 0 or shutil.which("cmake") is None:
            pytest.skip(f"docs/PYTHON.md:{line} needs python3-venv and cmake")
    home = tmp_path / "home"
    home.mkdir()
    env = environment(home)
    if language == "python":
        env["PYTHONPATH"] = str(ROOT / "python")
        command = [sys.executable, "-c", body]
    else:
        command = ["bash", "-e", "-o", "pipefail", "-c", body]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=540)
    assert done.returncode == 0, (f"docs/PYTHON.md:{line} failed ({done.returncode}):\n"
                                  f"{body}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n"
                                  f"{done.stderr[-3000:]}")
