"""Where the tests find the build: FULCRUM_PLUGIN (libfulcrum_balancer.so),
FULCRUM_CLI (the fulcrum command) and FULCRUM_TEST_PLUGINS (the broken
fixtures' directory). ctest sets all three; run by hand, they default to the
release build of this checkout."""

import os
import pathlib
import sys

import pytest

import plugin_doubles

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

BUILD = ROOT / "build" / "release"
PLUGIN = pathlib.Path(os.environ.get("FULCRUM_PLUGIN",
                                     BUILD / "lib" / "fulcrum" / "libfulcrum_balancer.so"))
CLI = pathlib.Path(os.environ.get("FULCRUM_CLI", BUILD / "bin" / "fulcrum"))
TEST_PLUGINS = pathlib.Path(os.environ.get("FULCRUM_TEST_PLUGINS", BUILD / "test_plugins"))


def _need(path, what):
    if not path.exists():
        pytest.fail(f"{what} {path} does not exist; build first (cmake --build --preset "
                    "release) or set the environment variable", pytrace=False)
    return path


@pytest.fixture(scope="session")
def plugin_path():
    return _need(PLUGIN, "plugin")


@pytest.fixture(scope="session")
def cli_path():
    return _need(CLI, "fulcrum CLI")


@pytest.fixture(scope="session")
def test_plugins():
    return _need(TEST_PLUGINS, "broken-plugin fixtures directory")


@pytest.fixture(scope="session")
def balancer(plugin_path):
    import fulcrum

    with fulcrum.load(str(plugin_path)) as b:
        yield b


@pytest.fixture(scope="session")
def figureless_balancer(plugin_path):
    """The plugin with its per-rank figures withheld: every plan comes back
    with rank_pairs and rank_tiles NULL, as the ABI allows, so the package
    computes them itself."""
    import fulcrum

    b = fulcrum.load(str(plugin_path))
    b._table = plugin_doubles.altered_plans(b._table, plugin_doubles.without_figures)
    with b:
        yield b
