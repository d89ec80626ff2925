"""Finding a plugin file, deciding whether to trust it, and opening it (dlopen
and its function table checked field by field): the host's rules
(runtime/host/plugin_search.cpp, plugin_permissions.cpp and
plugin_table_check.cpp) applied from Python.

A plugin runs in the calling process, so a file that anyone but root or this
user owns, or that group or others may write, or that sits under a directory
like that, is refused: whoever can write it could run code in every rank
that loads it.

Where a plugin given by name is looked for, in this order (docs/PYTHON.md):

1. ``search_dirs`` when the caller gives them, and nothing else;
2. the directories of ``$FULCRUM_PLUGIN_PATH`` (colon separated);
3. this checkout's builds, when the package runs from a checkout:
   ``<repo>/build/<preset>/lib/fulcrum``, ``release`` first, then the other
   presets by name;
4. the directories ``cmake --install`` put the plugin in, as recorded when
   the package was pip-installed from a checkout whose build had been
   installed (``_install_record.py``, written by setup.py);
5. ``<sys.prefix>/lib/fulcrum`` (cmake --install into the same prefix as
   the Python environment) and ``/usr/local/lib/fulcrum`` (cmake's default
   prefix).
"""

import ctypes
import errno
import os
import stat
import struct
import sys

from . import _abi
from . import _input_file
from ._c_values import _MAX_NAME_BYTES, _address, _checked_text
from .errors import FulcrumError

DEFAULT_PLUGIN = "fulcrum_balancer"
# The C++ host's bound on a plugin file (check_elf_complete).
_MAX_PLUGIN_BYTES = 1 << 31
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# More strategies than this means the count field is garbage (as the host).
_MAX_STRATEGIES = 4096


def library_file_name(name):
    return name if name.endswith(".so") and len(name) > 3 else f"lib{name}.so"


def checkout_build_dirs():
    """The plugin directories of this checkout's builds (release first), when
    the package is the one in python/ of a fulcrum checkout; else []."""
    root = os.path.dirname(os.path.dirname(_PACKAGE_DIR))
    if not os.path.isfile(os.path.join(root, "include", "fulcrum", "c_api.h")):
        return []
    build = os.path.join(root, "build")
    try:
        presets = sorted(os.listdir(build))
    except OSError:
        presets = []
    presets.sort(key=lambda name: name != "release")
    return [os.path.join(build, p, "lib", "fulcrum") for p in presets
            if os.path.isdir(os.path.join(build, p, "lib", "fulcrum"))] or \
        [os.path.join(build, "release", "lib", "fulcrum")]


def recorded_install_dirs():
    """Where cmake --install put the plugin, as recorded at pip install time."""
    try:
        from . import _install_record
    except ImportError:
        return []
    dirs = getattr(_install_record, "PLUGIN_DIRS", ())
    return [d for d in dirs if isinstance(d, str)]


def default_search_dirs():
    """Every directory a plugin name is looked for in, in order: the
    directories of $FULCRUM_PLUGIN_PATH, this checkout's builds (release
    first), the directories recorded when the package was installed, then
    <sys.prefix>/lib/fulcrum and /usr/local/lib/fulcrum (cmake --install's
    default prefix). The C++ host searches next to its executable instead,
    which has no meaning for a Python process."""
    dirs = []
    candidates = [d for d in os.environ.get("FULCRUM_PLUGIN_PATH", "").split(":") if d]
    candidates += checkout_build_dirs() + recorded_install_dirs()
    candidates += [os.path.join(sys.prefix, "lib", "fulcrum"), "/usr/local/lib/fulcrum"]
    for d in candidates:
        d = os.path.normpath(d)
        if d not in dirs:
            dirs.append(d)
    return dirs


def resolve_plugin_path(name_or_path, search_dirs=None):
    """The canonical path of a plugin given by path (contains '/') or by name."""
    raw = _input_file.as_path(name_or_path, "plugin")
    name_or_path = os.fsdecode(raw)
    if not name_or_path:
        raise FulcrumError(
            "invalid_argument",
            "empty plugin name; give a name such as 'fulcrum_balancer' or a path to a .so file")
    if "/" in name_or_path:
        path = name_or_path
        if not os.path.lexists(path):
            raise FulcrumError(
                "not_found",
                f"plugin file {_input_file.shown(path)} does not exist; check the path, or give "
                "a plugin name to search FULCRUM_PLUGIN_PATH, this checkout's build and the "
                "install directories")
    else:
        file = library_file_name(name_or_path)
        if search_dirs is None:
            dirs = default_search_dirs()
        elif isinstance(search_dirs, (str, bytes, os.PathLike)):
            raise FulcrumError("invalid_argument", "search_dirs is "
                               f"{_input_file.shown(search_dirs)}, one path; give a list of "
                               "directories")
        else:
            try:
                dirs = [os.fsdecode(_input_file.as_path(d, "search_dirs entry"))
                        for d in search_dirs]
            except TypeError:
                raise FulcrumError("invalid_argument", "search_dirs is "
                                   f"{_input_file.shown(search_dirs)}; give a list of "
                                   "directories") from None
        path = next((os.path.join(d, file) for d in dirs if os.path.lexists(os.path.join(d, file))),
                    None)
        if path is None:
            where = ", ".join(_input_file.shown(d) for d in dirs) if dirs \
                else "(no search directories)"
            raise FulcrumError(
                "not_found",
                f"plugin {_input_file.shown(name_or_path)} not found: no "
                f"{_input_file.shown(file)} in {where}; "
                "build it (cmake --build --preset release), install it there, add its directory "
                "to FULCRUM_PLUGIN_PATH, or give the plugin's path")
    canonical = os.path.realpath(path)
    if not os.path.isfile(canonical):
        what = "does not exist (a dangling link)" if not os.path.lexists(canonical) \
            else "is not a regular file"
        raise FulcrumError(
            "invalid_argument",
            f"plugin path {_input_file.shown(canonical)} {what}; give the path of the plugin's "
            ".so file")
    return path, canonical


def _owner_ok(uid):
    return uid == 0 or uid == os.geteuid()


def _directories_to_check(given_path, plugin_path):
    """Every directory from / down to the resolved file, and down to each
    component of the path as given (a link in any of them could be pointed
    elsewhere by whoever may write it), as the C++ host walks them."""
    out = set()

    def up_from(directory):
        while True:
            out.add(directory)
            parent = os.path.dirname(directory)
            if parent == directory:
                return
            directory = parent

    up_from(os.path.dirname(plugin_path))
    absolute = os.path.abspath(given_path)
    prefix = "/"
    for part in absolute.split("/")[1:]:
        prefix = os.path.join(prefix, part)
        up_from(os.path.realpath(os.path.dirname(prefix)))
    return sorted(out)


def check_permissions(plugin_path, given_path=None):
    """Refuses a plugin file, or a directory on its way, that someone other
    than root or this user owns, or that group or others may write. A sticky
    directory (mode +t, like /tmp) owned by root or this user may be writable
    by all: the sticky bit keeps others from swapping entries they do not own."""
    given_path = plugin_path if given_path is None else given_path
    shown = _input_file.shown

    def refuse_mode(path, what, mode):
        return FulcrumError(
            "permission",
            f"refusing plugin {plugin_path}: {what} {path} has mode {stat.S_IMODE(mode):04o}, "
            "writable by group or others, who could then run code in every rank; run "
            f"`chmod go-w {path}`")

    def refuse_owner(path, what, uid):
        return FulcrumError(
            "permission",
            f"refusing plugin {plugin_path}: {what} {path} is owned by uid {uid}, neither root "
            f"nor this user (uid {os.geteuid()}), who could then run code in every rank; "
            "install the plugin where only root or you can write, or "
            f"`chown {os.geteuid()} {path}`")

    def status(path):
        try:
            return os.stat(path)
        except OSError as error:
            raise FulcrumError(
                "not_found",
                f"cannot stat {shown(path)} while checking plugin {plugin_path}: "
                f"{error.strerror}") from None

    info = status(plugin_path)
    if not _owner_ok(info.st_uid):
        raise refuse_owner(plugin_path, "the file", info.st_uid)
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise refuse_mode(plugin_path, "the file", info.st_mode)
    holder = os.path.dirname(plugin_path)
    for directory in _directories_to_check(given_path, plugin_path):
        info = status(directory)
        what = "its directory" if directory == holder else "the directory on its path"
        if not _owner_ok(info.st_uid):
            raise refuse_owner(directory, what, info.st_uid)
        writable = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if writable and not info.st_mode & stat.S_ISVTX:
            raise refuse_mode(directory, what, info.st_mode)


def check_elf_complete(plugin_path):
    """A file cut short passes dlopen's header checks and faults with SIGBUS
    when the loader touches a page past its end, so the ELF header and every
    segment the loader maps must lie inside the file (as the host checks)."""
    rules = _input_file.InputRules(f"plugin {plugin_path}",
                                   "give the path of the plugin's .so file", _MAX_PLUGIN_BYTES)
    fd, size = _input_file.open_input_file(plugin_path, rules)

    def incomplete(why):
        return FulcrumError("invalid_argument", f"plugin {plugin_path} is not a complete shared "
                            f"library ({why}, file size {size} bytes); it was truncated or is "
                            "not a plugin: rebuild or reinstall it")

    def read_at(n, offset):
        if offset > size or n > size - offset:
            return None
        try:
            data = os.pread(fd, n, offset)
        except OSError as error:
            if error.errno == errno.EINTR:
                return read_at(n, offset)
            return None
        return data if len(data) == n else None

    try:
        header = read_at(64, 0)
        if header is None or header[:4] != b"\x7fELF":
            raise incomplete("no ELF header")
        if header[4] != 2:
            raise incomplete("not a 64-bit ELF file")
        order = "<" if header[5] == 1 else ">"
        phoff, shoff = struct.unpack_from(order + "QQ", header, 32)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", header, 54)

        def table_fits(offset, count, entry):
            return offset <= size and (count == 0 or entry <= (size - offset) // count)

        if not table_fits(phoff, phnum, phentsize) or phentsize < 56:
            raise incomplete("the program header table ends past the end of the file")
        if not table_fits(shoff, shnum, shentsize):
            raise incomplete("the section header table ends past the end of the file")
        for i in range(phnum):
            segment = read_at(56, phoff + i * phentsize)
            if segment is None:
                raise incomplete(f"program header {i} cannot be read")
            offset, _, _, filesz = struct.unpack_from(order + "QQQQ", segment, 8)
            if offset > size or filesz > size - offset:
                raise incomplete(f"segment {i} ends at byte {offset + filesz}")
    finally:
        os.close(fd)


def open_plugin(name_or_path, search_dirs=None, check_owner_and_modes=True):
    """(library, table, path) of a plugin found, trusted, dlopen'ed and its
    table checked: everything ``fulcrum.load`` does before it creates an
    instance."""
    given, path = resolve_plugin_path(name_or_path, search_dirs)
    if check_owner_and_modes:
        check_permissions(path, given)
    check_elf_complete(path)
    try:
        library = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as error:
        raise FulcrumError("internal", f"cannot load plugin {path}: {error}; check that it is a "
                           "fulcrum plugin built for this platform and that its dependencies "
                           f"resolve (ldd {path})") from None
    try:
        entry = getattr(library, _abi.PLUGIN_ENTRY)
    except AttributeError:
        raise FulcrumError("internal", f"plugin {path} does not export {_abi.PLUGIN_ENTRY}; is it "
                           "a fulcrum plugin? Export one with FULCRUM_EXPORT_PLUGIN") from None
    entry.restype = ctypes.c_void_p
    entry.argtypes = []
    address = entry()
    return library, _check_table(address, path), path


def _check_table(address, path):
    """Everything the host relies on before calling through the table."""
    if not address:
        raise FulcrumError("internal", f"plugin {path}: {_abi.PLUGIN_ENTRY}() returned no "
                           "function table (the plugin failed to initialise); run it under its "
                           "own tests or rebuild it")
    header = _abi.TableHeader.from_address(address)
    if header.struct_size < _abi.TABLE_HEADER_SIZE:
        raise FulcrumError("internal", f"plugin {path} has a function table of "
                           f"{header.struct_size} bytes, too small to hold its ABI version; "
                           "rebuild it against this fulcrum")
    if header.abi_major != _abi.ABI_MAJOR:
        raise FulcrumError("internal", f"plugin {path} was built for ABI major "
                           f"{header.abi_major}, this package speaks {_abi.ABI_MAJOR}; rebuild "
                           "it against this fulcrum")
    if header.struct_size < _abi.TABLE_V1_SIZE:
        raise FulcrumError("internal", f"plugin {path} has a function table of struct_size "
                           f"{header.struct_size} bytes, smaller than the {_abi.TABLE_V1_SIZE} "
                           "bytes of ABI v1.0; it was built against a broken c_api.h, rebuild it "
                           "against this fulcrum")
    table = _abi.PluginTableV1.from_address(address)
    for field_name in ("create", "destroy", "plan_cp", "release_plan", "partition_dp",
                       "last_error"):
        if not getattr(table, field_name):
            raise FulcrumError("internal", f"plugin {path}: required function '{field_name}' is "
                               "null in its table; the plugin is incomplete, implement it and "
                               "rebuild")
    if not table.name:
        raise FulcrumError("internal", f"plugin {path} has no name in its table; set "
                           "fulcrum_plugin_v1::name and rebuild")

    def check_name(address, field):
        # Names reach messages, JSON and logs as they are.
        _, why = _checked_text(address, _MAX_NAME_BYTES)
        if why is not None:
            raise FulcrumError("internal", f"plugin {path}: its {field} {why}; names are UTF-8 "
                               f"without control characters, at most {_MAX_NAME_BYTES} bytes: "
                               "fix the table and rebuild")

    check_name(ctypes.c_void_p.from_address(address + _abi.PluginTableV1.name.offset).value,
               "name")
    for names, count, what in ((table.cp_strategies, table.num_cp_strategies, "cp_strategies"),
                               (table.dp_strategies, table.num_dp_strategies, "dp_strategies")):
        if count < 0 or count > _MAX_STRATEGIES:
            raise FulcrumError("internal", f"plugin {path} lists {count} {what}; expected 0 to "
                               f"{_MAX_STRATEGIES}, its table is corrupt")
        if count > 0 and not names:
            raise FulcrumError("internal", f"plugin {path}: {what} is null but its count is "
                               f"{count}; fix the table and rebuild")
        addresses = (ctypes.c_void_p * count).from_address(_address(names)) if count else []
        for i in range(count):
            if not addresses[i]:
                raise FulcrumError("internal", f"plugin {path}: {what}[{i}] is null; fix the "
                                   "table and rebuild")
            check_name(addresses[i], f"{what}[{i}]")
    # ABI 1.1 appends the scheduler; a table too short to hold it is a 1.0
    # plugin and keeps the 1.0 view.
    if not _abi.table_has(header.struct_size, _abi.PluginTableV1_1, "release_schedule"):
        return table
    table = _abi.PluginTableV1_1.from_address(address)
    if bool(table.schedule) != bool(table.release_schedule):
        raise FulcrumError("internal", f"plugin {path} sets only one of schedule and "
                           "release_schedule; a scheduler needs both, fix the table and rebuild")
    count = table.num_schedule_strategies
    if table.schedule:
        addresses = ([] if count < 1 or count > _MAX_STRATEGIES or not table.schedule_strategies
                     else (ctypes.c_void_p * count).from_address(
                         _address(table.schedule_strategies)))
        if not addresses or not all(addresses):
            raise FulcrumError("internal", f"plugin {path} has a scheduler but its "
                               f"schedule_strategies ({count}) are not a list of names; fix the "
                               "table and rebuild")
        for i in range(count):
            check_name(addresses[i], f"schedule_strategies[{i}]")
    return table
