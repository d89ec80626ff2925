"""Reading a file the caller named: the rules of runtime/host/input_file.h.

Every file the package reads (metrics, lengths lists, cost profiles) comes
through here, so that a FIFO, a device, a directory, a socket or a /proc
file named where a file is expected is refused in one line with the C++
readers' words, instead of blocking in open(2), reading forever or raising
whatever Python happens to raise. The messages are the C++ ones: ``what``
names the flag or argument with the path, ``fix`` says what to give instead.
"""

import ctypes
import ctypes.util
import errno
import os
import stat

from .errors import FulcrumError

# f_type of the file systems whose files are generated as they are read
# (proc, sysfs).
GENERATED_FILE_SYSTEMS = (0x9FA0, 0x62656572)
_CHUNK = 1 << 16


def as_path(path, what):
    """``path`` as bytes for the OS (str, bytes or os.PathLike), or a
    FulcrumError naming what was given instead. Non-UTF-8 names (bytes, or
    str holding the file system's surrogate escapes) pass through."""
    try:
        path = os.fspath(path)
    except TypeError:
        raise FulcrumError("invalid_argument", f"{what} is {shown(path)}, not a path; give a "
                           "file name (str, bytes or os.PathLike)") from None
    try:
        raw = os.fsencode(path)
    except UnicodeError:
        raise FulcrumError("invalid_argument", f"{what} {shown(path)} cannot be encoded as a "
                           "file name; give a path the file system can hold") from None
    if b"\0" in raw:
        raise FulcrumError("invalid_argument", f"{what} {shown(path)} holds a NUL byte; give "
                           "a path without one")
    return raw


def shown(value, limit=200):
    """A value for a message: one line, at most ``limit`` characters, text
    quoted, bytes that are not UTF-8 and lone surrogates escaped."""
    if isinstance(value, os.PathLike):
        try:
            value = os.fspath(value)
        except TypeError:
            pass
    if isinstance(value, bytes):
        text = value.decode("utf-8", "backslashreplace")
    elif isinstance(value, str):
        try:  # a file name's undecodable bytes, as the file system holds them
            text = value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:
            text = value.encode("utf-8", "backslashreplace").decode("utf-8")
    else:
        try:
            text = repr(value)
        except Exception:  # noqa: BLE001 - a hostile __repr__ must not hide the real error
            text = f"<{type(value).__name__}>"
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    text = "".join(" " if ord(c) < 0x20 or ord(c) == 0x7F else c for c in text[:limit + 1])
    if len(text) > limit:
        text = text[:limit] + "..."
    return f"'{text}'" if isinstance(value, (str, bytes)) else text


def kind_of(mode):
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    if stat.S_ISFIFO(mode):
        return "is a FIFO (named pipe), not a file"
    if stat.S_ISCHR(mode):
        return "is a character device, not a file"
    if stat.S_ISBLK(mode):
        return "is a block device, not a file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a file"
    return "is not a regular file"


def file_system_type(fd):
    """f_type of the descriptor's file system, or None where it cannot be
    read (fstatfs through libc; struct statfs starts with f_type, a long,
    on Linux)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        buffer = ctypes.create_string_buffer(256)
        if libc.fstatfs(fd, buffer) != 0:
            return None
        return ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF
    except (OSError, AttributeError):
        return None


class InputRules:
    """How a reader names what it was given (InputFileRules)."""

    def __init__(self, what, fix, max_bytes):
        self.what, self.fix, self.max_bytes = what, fix, max_bytes

    def refuse(self, reason, code="invalid_argument"):
        return FulcrumError(code, f"{self.what} {reason}; {self.fix}")


def open_input_file(path, rules):
    """An open descriptor of a regular file of at most rules.max_bytes outside
    /proc and /sys, and its size. The open never blocks (O_NONBLOCK) and the
    type is checked on the descriptor."""
    raw = as_path(path, rules.what)
    if not raw:
        raise rules.refuse("is an empty path")
    try:
        fd = os.open(raw, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.ENOENT:
            raise rules.refuse("does not exist", "not_found") from None
        if error.errno == errno.ELOOP:
            raise rules.refuse("is a symbolic link loop") from None
        if error.errno == errno.ENOTDIR:
            raise rules.refuse("cannot be reached: a component of the path is not a "
                               "directory") from None
        if error.errno == errno.ENAMETOOLONG:
            raise rules.refuse("is too long a path") from None
        try:
            mode = os.stat(raw).st_mode
        except OSError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            raise rules.refuse(kind_of(mode)) from None
        raise rules.refuse(f"cannot be opened ({error.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise rules.refuse(kind_of(info.st_mode))
        if file_system_type(fd) in GENERATED_FILE_SYSTEMS:
            raise rules.refuse("is a /proc or /sys file, not a file of data")
        if info.st_size > rules.max_bytes:
            raise rules.refuse(f"holds {info.st_size} bytes, more than the {rules.max_bytes} "
                               "allowed")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def read_input_file(path, rules):
    """The whole of a regular file as bytes, at most rules.max_bytes (a file
    that grows while it is read is cut off there and refused)."""
    fd, size = open_input_file(path, rules)
    parts, total = [], 0
    try:
        while True:
            try:
                chunk = os.read(fd, _CHUNK)
            except InterruptedError:
                continue
            except OSError as error:
                raise rules.refuse(f"could not be read ({error.strerror})") from None
            if not chunk:
                break
            total += len(chunk)
            if total > rules.max_bytes:
                raise rules.refuse(f"grew past the {rules.max_bytes} bytes allowed")
            parts.append(chunk)
    finally:
        os.close(fd)
    return b"".join(parts)


def json_nesting_within(text, max_depth):
    """(True, None) when [ and { nest at most max_depth deep outside strings in
    JSON ``text`` (bytes), else (False, offset of the first byte past it)."""
    if text.count(b"[") + text.count(b"{") <= max_depth:
        return True, None
    depth = 0
    in_string = escaped = False
    for i, c in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif c == 0x5C:      # backslash
                escaped = True
            elif c == 0x22:      # "
                in_string = False
            continue
        if c == 0x22:
            in_string = True
        elif c in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > max_depth:
                return False, i
        elif c in (0x5D, 0x7D) and depth > 0:
            depth -= 1
    return True, None
