"""Finding a plugin file and deciding whether to trust it: the host's rules
(runtime/host/plugin_loader.cpp) applied from Python.

A plugin runs in the calling process, so a file that group or others may
write, or that sits in a directory they may write, is refused: whoever can
write it could run code in every rank that loads it.
"""

import os
import stat
import sys

from .errors import FulcrumError

DEFAULT_PLUGIN = "fulcrum_balancer"


def library_file_name(name):
    return name if name.endswith(".so") and len(name) > 3 else f"lib{name}.so"


def default_search_dirs():
    """$FULCRUM_PLUGIN_PATH (colon separated), then the install directories:
    <sys.prefix>/lib/fulcrum and /usr/local/lib/fulcrum (cmake --install's
    default prefix). The C++ host searches next to its executable instead,
    which has no meaning for a Python process."""
    dirs = []
    for d in os.environ.get("FULCRUM_PLUGIN_PATH", "").split(":"):
        if d and d not in dirs:
            dirs.append(d)
    for d in (os.path.join(sys.prefix, "lib", "fulcrum"), "/usr/local/lib/fulcrum"):
        d = os.path.normpath(d)
        if d not in dirs:
            dirs.append(d)
    return dirs


def resolve_plugin_path(name_or_path, search_dirs=None):
    """The canonical path of a plugin given by path (contains '/') or by name."""
    name_or_path = os.fspath(name_or_path)
    if not name_or_path:
        raise FulcrumError(
            "invalid_argument",
            "empty plugin name; give a name such as 'fulcrum_balancer' or a path to a .so file")
    if "/" in name_or_path:
        path = name_or_path
        if not os.path.exists(path):
            raise FulcrumError(
                "not_found",
                f"plugin file {path} does not exist; check the path, or give a plugin name to "
                "search FULCRUM_PLUGIN_PATH and the install directories")
    else:
        file = library_file_name(name_or_path)
        dirs = list(search_dirs) if search_dirs else default_search_dirs()
        path = next((os.path.join(d, file) for d in dirs if os.path.exists(os.path.join(d, file))),
                    None)
        if path is None:
            where = ", ".join(dirs) if dirs else "(no search directories)"
            raise FulcrumError(
                "not_found",
                f"plugin {name_or_path!r} not found: no {file} in {where}; install it there, add "
                "its directory to FULCRUM_PLUGIN_PATH, or give the plugin's path")
    canonical = os.path.realpath(path)
    if not os.path.isfile(canonical):
        raise FulcrumError(
            "invalid_argument",
            f"plugin path {canonical} is not a regular file; give the path of the plugin's .so file")
    return canonical


def _ancestors(directory):
    """`directory` and every directory above it, up to /."""
    out = [directory]
    while os.path.dirname(out[-1]) != out[-1]:
        out.append(os.path.dirname(out[-1]))
    return out


def check_permissions(plugin_path, given_path=None):
    """Refuses a plugin that anyone but root and this user could replace, as
    the host does (plugin_loader.cpp): the file and every directory from /
    down to it, and down to each link on the path as given, must be owned by
    root or this user (an owner may always chmod and write) and writable by
    the owner alone, but for a sticky directory (like /tmp), whose other
    users cannot move the entries they do not own."""
    me = os.geteuid()
    directories = _ancestors(os.path.dirname(plugin_path))
    if given_path is not None:
        prefix = "/"
        for part in os.path.abspath(given_path).split("/")[1:]:
            holder = os.path.realpath(prefix)
            directories.extend(_ancestors(holder))
            prefix = os.path.join(prefix, part)
    checks = [(plugin_path, "the file")]
    home = os.path.dirname(plugin_path)
    for directory in sorted(set(directories)):
        checks.append((directory, "its directory" if directory == home
                       else "the directory on its path"))
    for path, what in checks:
        try:
            info = os.stat(path)
        except OSError as error:
            raise FulcrumError(
                "not_found",
                f"cannot stat {path} while checking plugin {plugin_path}: {error.strerror}") from None
        if info.st_uid not in (0, me):
            raise FulcrumError(
                "permission",
                f"refusing plugin {plugin_path}: {what} {path} is owned by uid {info.st_uid}, "
                f"neither root nor this user (uid {me}), who could then swap it and run code in "
                "every rank; install the plugin where only root or you own the file and every "
                "directory above it")
        sticky = what != "the file" and info.st_mode & stat.S_ISVTX
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky:
            raise FulcrumError(
                "permission",
                f"refusing plugin {plugin_path}: {what} {path} has mode "
                f"{stat.S_IMODE(info.st_mode):04o}, writable by group or others, who could then "
                f"run code in every rank; run `chmod go-w {path}`")
