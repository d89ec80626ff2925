"""ctest's entry to the pytest suite: exit 77 (reported as skipped) with one
line naming the missing Debian packages when pytest or NumPy is absent.

    run_pytest.py            the package's suite (python_package), less
                             test_readme.py, which trains and is its own test
    run_pytest.py FILE ...   those test files (readme_commands)"""

import importlib.util
import os
import sys

missing = [pkg for module, pkg in (("pytest", "python3-pytest"), ("numpy", "python3-numpy"))
           if importlib.util.find_spec(module) is None]
if missing:
    print(f"python_package: SKIPPED, {sys.executable} lacks {', '.join(missing)}; "
          "run bash third_party/install.sh", flush=True)
    sys.exit(77)

import pytest  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
chosen = sys.argv[1:] or [here, "--ignore", os.path.join(here, "test_readme.py")]
sys.exit(pytest.main(["-q", "-rs", "-p", "no:cacheprovider", *chosen]))
