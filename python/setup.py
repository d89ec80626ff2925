"""Metadata is in setup.cfg. This file adds one step to the build: it records
where `cmake --install` put the plugin, so that the installed package's
`fulcrum.load()` finds it (docs/PYTHON.md, "Where load() looks").

The record is fulcrum/_install_record.py, written into the build only (never
into the checkout): the directory of every libfulcrum_balancer.so listed in
the install manifests (install_manifest*.txt) of this checkout's builds, the
release build's first. A package built with no installed build records
nothing and falls back on <sys.prefix>/lib/fulcrum and /usr/local/lib/fulcrum.
"""

import glob
import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PLUGIN_FILE = "libfulcrum_balancer.so"
MAX_MANIFEST_BYTES = 16 << 20


def installed_plugin_dirs(checkout):
    manifests = glob.glob(os.path.join(checkout, "build", "*", "install_manifest*.txt"))
    manifests.sort(key=lambda m: (os.path.basename(os.path.dirname(m)) != "release",
                                  -os.path.getmtime(m)))
    dirs = []
    for manifest in manifests:
        if not os.path.isfile(manifest) or os.path.getsize(manifest) > MAX_MANIFEST_BYTES:
            continue
        with open(manifest, encoding="utf-8", errors="replace") as listing:
            for line in listing:
                path = line.strip()
                if os.path.basename(path) == PLUGIN_FILE and os.path.isabs(path):
                    directory = os.path.dirname(path)
                    if directory not in dirs:
                        dirs.append(directory)
    return dirs


class BuildWithInstallRecord(build_py):
    def run(self):
        super().run()
        record = os.path.join(self.build_lib, "fulcrum", "_install_record.py")
        dirs = installed_plugin_dirs(os.path.dirname(HERE))
        with open(record, "w", encoding="utf-8") as out:
            out.write("# Written by setup.py when the package was built: where cmake --install\n"
                      "# put the plugin (the install manifests of the checkout's builds).\n"
                      f"PLUGIN_DIRS = {dirs!r}\n")


setup(cmdclass={"build_py": BuildWithInstallRecord})
