"""ctest's entry to the GPU harness's pytest suite (what runs on the CPU:
rows, plans, masks against the plans' tiles, the reference check, the fits,
the --quick run). Exit 77 (reported as skipped) with one line naming the
missing Debian packages when pytest, NumPy or torch is absent."""

import importlib.util
import os
import sys

missing = [pkg for module, pkg in (("pytest", "python3-pytest"), ("numpy", "python3-numpy"),
                                   ("torch", "python3-torch"))
           if importlib.util.find_spec(module) is None]
if missing:
    print(f"gpu_benchmark_harness: SKIPPED, {sys.executable} lacks {', '.join(missing)}; "
          "run bash third_party/install.sh", flush=True)
    sys.exit(77)

import pytest  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
sys.exit(pytest.main(["-q", "-rs", "-p", "no:cacheprovider", here]))
