"""ctest's entry to the pytest suite: exit 77 (reported as skipped) with one
line naming the missing Debian packages when pytest or NumPy is absent.

    run_pytest.py            the package's suite (python_package), less
                             test_readme.py, which trains and is its own test
    run_pytest.py FILE ...   those test files (readme_commands)

run() is also the GPU harness's entry (benchmarks/gpu/tests/run_pytest.py)."""

import importlib.util
import os
import sys

NEEDED = (("pytest", "python3-pytest"), ("numpy", "python3-numpy"))


def run(suite, needed, chosen):
    """pytest over ``chosen`` (paths and options), quiet, skips listed; 77
    with one line naming the missing Debian packages when a module of
    ``needed`` ((module, package) pairs) is absent."""
    missing = [pkg for module, pkg in needed if importlib.util.find_spec(module) is None]
    if missing:
        print(f"{suite}: SKIPPED, {sys.executable} lacks {', '.join(missing)}; "
              "run bash third_party/install.sh", flush=True)
        return 77
    import pytest

    return pytest.main(["-q", "-rs", "-p", "no:cacheprovider", *chosen])


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    sys.exit(run("python_package", NEEDED,
                 sys.argv[1:] or [here, "--ignore", os.path.join(here, "test_readme.py")]))
