"""Loads a benchmark script, or another test file, as a module by its path
(they are not packages): the tests of benchmarks/*.py call their functions."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def benchmark(name):
    """benchmarks/NAME.py as the module NAME."""
    return load(name, ROOT / "benchmarks" / f"{name}.py")
