"""pip install of the package works offline, into a virtual environment that
sees the Debian packages, and the installed copy plans a row."""

import os
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


def make_venv(tmp_path, where="venv"):
    venv = tmp_path / where
    made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                          capture_output=True, text=True, timeout=120)
    if made.returncode != 0:
        pytest.skip(f"no venv with pip here (Debian: python3-venv): {made.stderr.strip()[-200:]}")
    return venv


def pip_install(venv, source):
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-index",
                           "--no-deps", "--disable-pip-version-check", str(source)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def load_without_a_path(venv, cwd, env_extra=None):
    """fulcrum.load() with no argument in the venv's Python, away from any
    checkout and with FULCRUM_PLUGIN_PATH unset: (module file, plugin path)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("FULCRUM_PLUGIN_PATH", "PYTHONPATH")}
    env.update(env_extra or {})
    ran = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import fulcrum; b = fulcrum.load(); print(fulcrum.__file__); "
                          "print(b.path); print(b.plan_cp('auto', cp=2, tokens=256).tokens)"],
                         capture_output=True, text=True, timeout=120, cwd=cwd, env=env)
    assert ran.returncode == 0, ran.stderr
    module, plugin, tokens = ran.stdout.split("\n")[:3]
    assert tokens == "256"
    return module, plugin


def test_the_installed_package_finds_the_plugin_cmake_installed(plugin_path, tmp_path):
    """cmake --install, then pip install ./python from that checkout: the
    package records where the install manifest says the plugin went, and
    fulcrum.load() finds it there with no path and no environment."""
    checkout = tmp_path / "checkout"
    shutil.copytree(PACKAGE, checkout / "python",
                    ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
    # What `cmake --install build/release --prefix PREFIX --component runtime`
    # leaves: the plugin under PREFIX/lib/fulcrum and the manifest naming it.
    prefix = tmp_path / "prefix"
    (prefix / "lib" / "fulcrum").mkdir(parents=True)
    installed = prefix / "lib" / "fulcrum" / "libfulcrum_balancer.so"
    shutil.copy(plugin_path, installed)
    installed.chmod(0o755)
    build = checkout / "build" / "release"
    build.mkdir(parents=True)
    (build / "install_manifest_runtime.txt").write_text(f"{prefix}/bin/fulcrum\n{installed}\n")
    venv = make_venv(tmp_path)
    pip_install(venv, checkout / "python")
    module, plugin = load_without_a_path(venv, tmp_path)
    assert module.startswith(str(venv)), module
    assert plugin == str(installed)
    record = pathlib.Path(module).parent / "_install_record.py"
    assert str(prefix / "lib" / "fulcrum") in record.read_text()
    assert not (checkout / "python" / "fulcrum" / "_install_record.py").exists()


def test_the_installed_package_finds_a_plugin_in_its_own_prefix(plugin_path, tmp_path):
    """With nothing recorded (the package installed before the plugin), a
    plugin installed into the environment's prefix, <sys.prefix>/lib/fulcrum,
    is found."""
    source = tmp_path / "src"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("tests", "__pycache__",
                                                                   "build", "*.egg-info"))
    venv = make_venv(tmp_path)
    pip_install(venv, source)
    (venv / "lib" / "fulcrum").mkdir()
    shutil.copy(plugin_path, venv / "lib" / "fulcrum" / "libfulcrum_balancer.so")
    module, plugin = load_without_a_path(venv, tmp_path)
    assert plugin == str(venv / "lib" / "fulcrum" / "libfulcrum_balancer.so")


def test_the_checkout_finds_its_own_build(plugin_path, tmp_path):
    """From the checkout, PYTHONPATH=python and nothing else: the release
    build's plugin (the README's build), or the error lists every place."""
    root = PACKAGE.parent
    release = root / "build" / "release" / "lib" / "fulcrum" / "libfulcrum_balancer.so"
    env = {k: v for k, v in os.environ.items() if k != "FULCRUM_PLUGIN_PATH"}
    env["PYTHONPATH"] = str(PACKAGE)
    ran = subprocess.run([sys.executable, "-c", "import fulcrum; print(fulcrum.load().path)"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    if release.is_file():
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() == str(release)
    else:
        assert ran.returncode != 0
        assert str(root / "build" / "release" / "lib" / "fulcrum") in ran.stderr
        assert "/usr/local/lib/fulcrum" in ran.stderr
