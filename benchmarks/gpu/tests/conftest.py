import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("FULCRUM_CLI")
    if not path:
        from gpubench import plans, rows
        path = plans.default_cli(rows.REPO_ROOT)
    if not os.access(path, os.X_OK):
        pytest.skip(f"no fulcrum CLI at {path}: build it or set FULCRUM_CLI")
    return path
