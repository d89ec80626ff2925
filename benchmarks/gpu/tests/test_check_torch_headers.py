"""check_torch_headers.py, the check behind docs/RESULTS_GPU.md's "compiles
against 2.11's headers": against a copy of Debian's own LibTorch headers a
unit compiles and passes; with one header the unit needs taken out of the
copy, the compiler still finds Debian's and the check fails naming it; bad
input is refused in one line with exit 2."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "gpu" / "check_torch_headers.py"
UNIT = "runtime/comm/progress_board.cpp"
DEBIAN = pathlib.Path("/usr/include")


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.fixture(scope="module")
def commands():
    path = pathlib.Path(os.environ.get("FULCRUM_COMPILE_COMMANDS",
                                       ROOT / "build" / "release" / "compile_commands.json"))
    if not path.is_file() or not (DEBIAN / "torch/csrc/api/include/torch/torch.h").is_file():
        pytest.skip("needs a build's compile_commands.json against Debian's LibTorch")
    if UNIT not in path.read_text():
        pytest.skip(f"{path} has no {UNIT} (a build without the runtime)")
    return path


@pytest.fixture(scope="module")
def copy(commands, tmp_path_factory):
    where = tmp_path_factory.mktemp("include")
    for name in ("ATen", "c10", "torch", "caffe2"):
        shutil.copytree(DEBIAN / name, where / name, symlinks=True)
    return where


def test_a_unit_compiles_against_a_copy_of_the_headers_it_was_built_with(commands, copy):
    out = run("--include", copy, "--compile-commands", commands, "--match", UNIT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1] == "1 units, 0 failed"


def test_a_header_the_copy_lacks_is_found_in_debians_folder_and_fails(commands, copy,
                                                                      tmp_path):
    partial = tmp_path / "include"
    shutil.copytree(copy, partial, symlinks=True)
    (partial / "c10/core/GradMode.h").unlink()
    out = run("--include", partial, "--compile-commands", commands, "--match", UNIT)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "used Debian's /usr/include/c10/core/GradMode.h" in out.stdout


@pytest.mark.parametrize("args, says", [
    (["--include", "/nonexistent"], "holds no torch/csrc/api/include/torch/torch.h"),
    (["--include", "/usr/include", "--gloo", "/nonexistent"], "holds no gloo/config.h"),
    (["--include", "/usr/include", "--jobs", "0"], "outside 1..64"),
    (["--include", "/usr/include", "--match", "("], "not a regular expression"),
    (["--include", "/usr/include", "--compile-commands", "/nonexistent.json"], "cannot read"),
    (["--include", "/usr/include", "--compile-commands", "/dev/null"], "not a regular file"),
])
def test_bad_input_is_one_line_and_exit_2(args, says):
    if not (DEBIAN / "torch/csrc/api/include/torch/torch.h").is_file() and \
            args[1] == "/usr/include":
        pytest.skip("Debian's LibTorch headers are absent")
    out = run(*args)
    assert out.returncode == 2
    assert len(out.stderr.splitlines()) == 1 and says in out.stderr, out.stderr


@pytest.mark.parametrize("text, says", [
    ('[{"file": "a.cpp", "directory": "/", "command": "c++ -c a.cpp', "cannot read"),
    ('{"file": "a.cpp"}', "is not a list of compile commands"),
    ('[{"file": "a.cpp"}]', "an entry without a file and a directory"),
    ('[{"file": "a.cpp", "directory": "/", "command": 7}]', "reads as a list of arguments"),
    ('[{"file": "a.cpp", "directory": "/", "command": "c++ \\"unclosed"}]',
     "reads as a list of arguments"),
    ('[{"file": "a.cpp", "directory": "/", "arguments": ["c++", 3]}]',
     "reads as a list of arguments"),
])
def test_a_broken_compile_commands_file_is_one_line_and_exit_2(tmp_path, text, says):
    if not (DEBIAN / "torch/csrc/api/include/torch/torch.h").is_file():
        pytest.skip("Debian's LibTorch headers are absent")
    path = tmp_path / "compile_commands.json"
    path.write_text(text)
    out = run("--include", "/usr/include", "--compile-commands", path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert len(out.stderr.splitlines()) == 1 and says in out.stderr, out.stderr
