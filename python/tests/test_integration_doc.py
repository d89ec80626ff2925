"""docs/INTEGRATION.md's code is the code that runs: the PyTorch section's
first Python block is executed as it stands (on any torch), its second is
defined; every C++ and CMake excerpt of the C++ section is in
examples/embed, which ctest embed_example_against_install builds and runs."""

import os
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "INTEGRATION.md"


def section(title):
    text = DOC.read_text()
    parts = re.split(r"^## ", text, flags=re.M)
    found = [p for p in parts if p.startswith(title + "\n")]
    assert len(found) == 1, f"docs/INTEGRATION.md has no single '## {title}' section"
    return found[0]


def blocks(text, language):
    return re.findall(r"^```" + language + r"\n(.*?)^```", text, flags=re.M | re.S)


def squeeze(text):
    return " ".join(text.split())


def test_pytorch_section_runs(plugin_path, monkeypatch):
    pytest.importorskip("torch", reason="python3-torch is not installed")
    code = blocks(section("PyTorch context parallelism"), "python")
    assert len(code) == 2, "the PyTorch section has the runnable example and cp_step"
    monkeypatch.setenv("FULCRUM_PLUGIN_PATH", str(plugin_path.parent))
    scope = {"__name__": "integration_doc"}
    exec(compile(code[0], f"{DOC}:pytorch-example", "exec"), scope)  # noqa: S102
    assert scope["seen"] and scope["lb"].plans[0].cp == scope["cp"]
    defined = {}
    exec(compile(code[1], f"{DOC}:cp_step", "exec"), defined)  # noqa: S102
    assert callable(defined["cp_step"])


def test_cpp_excerpts_are_the_example():
    text = section("C++ frameworks")
    source = squeeze((ROOT / "examples" / "embed" / "embed.cpp").read_text())
    excerpts = blocks(text, "cpp")
    assert len(excerpts) >= 3
    for excerpt in excerpts:
        assert squeeze(excerpt) in source, f"not in examples/embed/embed.cpp: {excerpt}"
    cmake = squeeze((ROOT / "examples" / "embed" / "CMakeLists.txt").read_text())
    for excerpt in blocks(text, "cmake"):
        for line in excerpt.strip().splitlines():
            assert squeeze(line) in cmake, f"not in examples/embed/CMakeLists.txt: {line}"
    assert "embed_example_against_install" in text
    tests = (ROOT / "examples" / "CMakeLists.txt").read_text()
    assert "embed_example_against_install" in tests and os.access(
        ROOT / "examples" / "embed" / "check_against_install.sh", os.X_OK)
