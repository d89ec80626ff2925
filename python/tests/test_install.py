"""pip install of the package works offline, into a virtual environment that
sees the Debian packages, and the installed copy plans a row."""

import pathlib
import shutil
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1]


def test_offline_pip_install_into_a_venv(plugin_path, tmp_path):
    source = tmp_path / "src"
    # A copy, so that setuptools' build files land outside the checkout.
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("tests", "__pycache__",
                                                                   "build", "*.egg-info"))
    venv = tmp_path / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                          capture_output=True, text=True, timeout=120)
    if made.returncode != 0:
        pytest.skip(f"no venv with pip here (Debian: python3-venv): {made.stderr.strip()[-200:]}")
    python = venv / "bin" / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "--no-index", "--no-deps",
                           "--disable-pip-version-check", str(source)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    check = ("import fulcrum, sys; "
             f"b = fulcrum.load({str(plugin_path)!r}); "
             "p = b.plan_cp('auto', cp=4, doc_lengths=[100, 200, 724]); "
             "print(fulcrum.__file__); print(p.used, p.tokens)")
    ran = subprocess.run([str(python), "-c", check], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    where, answer = ran.stdout.split("\n")[:2]
    assert where.startswith(str(venv)), where   # the installed copy, not the checkout
    assert answer.split()[1] == "1024"
