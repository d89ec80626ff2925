"""ctest's entry to the GPU harness's pytest suite (what runs on the CPU:
rows, plans, masks against the plans' tiles, the reference check, the fits,
the --quick run). Exit 77 (reported as skipped) with one line naming the
missing Debian packages when pytest, NumPy or torch is absent; the package
suite's runner (python/tests/run_pytest.py) does the work."""

import importlib.util
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "fulcrum_run_pytest", os.path.join(here, "..", "..", "..", "python", "tests", "run_pytest.py"))
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)
sys.exit(runner.run("gpu_benchmark_harness", runner.NEEDED + (("torch", "python3-torch"),),
                    [here]))
