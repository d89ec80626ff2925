"""What crosses the C ABI: arguments checked to fit the C fields that carry
them, memory lent to the plugin read-only and compared after the call, and
text read back from the plugin within the host's bounds."""

import ctypes
import numbers

import numpy as np

from . import _abi
from . import _input_file
from .errors import FulcrumError

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_MASK_KINDS = {"causal": _abi.MASK_CAUSAL, "full": _abi.MASK_FULL,
               "sliding": _abi.MASK_SLIDING, "prefix": _abi.MASK_PREFIX}
# The host's bounds on text from a plugin (runtime/host/plugin_text.cpp):
# names, and free text (reasons, errors, log lines).
_MAX_NAME_BYTES = 256
_MAX_TEXT_BYTES = 4096
_LIBC = ctypes.CDLL(None)
_LIBC.strnlen.restype = ctypes.c_size_t
_LIBC.strnlen.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
# C0 and C1 controls, DEL, and the line and paragraph separators.
_CONTROL = frozenset(list(range(0x20)) + list(range(0x7f, 0xa0)) + [0x2028, 0x2029])


def _address(pointer):
    """The address a ctypes pointer or c_char_p field holds, or 0."""
    if pointer is None:
        return 0
    if isinstance(pointer, int):
        return pointer
    return ctypes.cast(pointer, ctypes.c_void_p).value or 0


def _bounded_bytes(address, limit):
    """The bytes at `address` up to their NUL, reading at most limit + 1;
    (bytes, terminated within limit)."""
    length = _LIBC.strnlen(address, limit + 1)
    return ctypes.string_at(address, min(length, limit)), length <= limit


def _checked_text(address, limit):
    """(text, None) when the bytes are what the ABI promises: NUL-terminated
    within `limit`, UTF-8, no control character; else (None, why)."""
    raw, terminated = _bounded_bytes(address, limit)
    if not terminated:
        return None, f"is not NUL-terminated within {limit} bytes"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return None, f"is not UTF-8 (byte {error.start} is 0x{raw[error.start]:02x})"
    for i, char in enumerate(text):
        if ord(char) in _CONTROL:
            return None, (f"holds the control character U+{ord(char):04X} at byte "
                          f"{len(text[:i].encode('utf-8'))}")
    return text, None


def _printable_text(address, limit):
    """The bytes at `address` shown on one line whatever they hold: controls
    and bytes that are not UTF-8 escaped (\\n, \\xHH), cut after `limit`."""
    raw, terminated = _bounded_bytes(address, limit)
    text = raw.decode("utf-8", "backslashreplace")
    out = []
    for char in text:
        code = ord(char)
        if code in _CONTROL:
            named = {0x0a: "\\n", 0x0d: "\\r", 0x09: "\\t"}.get(code)
            out.append(named or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"))
        else:
            out.append(char)
    return "".join(out) + ("" if terminated else "...")


class _Lent:
    """What a call lends the plugin. A `const` pointer is a promise the plugin
    can break, and the arrays behind it may be the caller's own: the plugin
    reads private copies, made per call, and after the call each copy is
    compared with what it was lent from, so that a plugin that wrote through
    a `const` pointer is named and refused and never rewrites a caller's
    NumPy array. The request struct itself is compared byte for byte, as
    the C++ host's LentMemory does."""

    def __init__(self):
        self._arrays = []
        self._texts = []
        self._reals = []
        self._structs = {}

    def watch(self, field, struct):
        """The request struct itself, compared byte for byte after the call
        (its padding too: ctypes zeroes a struct when it makes it). Watching
        a field again replaces its bytes: a retry with another strategy
        lends the struct anew."""
        address, size = ctypes.addressof(struct), ctypes.sizeof(struct)
        self._structs[field] = (address, ctypes.string_at(address, size))

    def array(self, field, values):
        copy = np.array(values, dtype=np.int64, copy=True)
        self._arrays.append((field, values, copy))
        return copy.ctypes.data_as(_abi.c_int64_p)

    def reals(self, field, values):
        """A float64 copy of ``values`` for the plugin, compared bit for bit."""
        copy = np.array(values, dtype=np.float64, copy=True)
        self._reals.append((field, np.array(values, dtype=np.float64, copy=True), copy))
        return copy.ctypes.data_as(_abi.c_double_p)

    def text(self, field, value):
        data = value.encode("utf-8")
        buffer = ctypes.create_string_buffer(data, len(data) + 1)
        self._texts.append((field, data + b"\0", buffer))
        return ctypes.cast(buffer, ctypes.c_char_p)

    def changed(self):
        """What the plugin wrote into, as a message names it, or None."""
        for field, (address, before) in self._structs.items():
            if ctypes.string_at(address, len(before)) != before:
                return f"the request struct {field}"
        for field, original, copy in self._arrays:
            differ = np.flatnonzero(copy != original)
            if differ.size:
                i = int(differ[0])
                return f"{field}[{i}] ({int(original[i])} lent, {int(copy[i])} after the call)"
        for field, original, copy in self._reals:
            differ = np.flatnonzero(copy.view(np.int64) != original.view(np.int64))
            if differ.size:
                return f"{field}[{int(differ[0])}]"
        for field, original, buffer in self._texts:
            if buffer.raw != original:
                return f"the string {field}"
        return None



def _c_int(value, name, bounds):
    """An integer that the C field can hold exactly (bools and floats refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise FulcrumError("invalid_argument",
                           f"{name} is {value!r}; it must be an integer")
    value = int(value)
    if not bounds[0] <= value <= bounds[1]:
        raise FulcrumError("invalid_argument",
                           f"{name} is {value}, outside the range the C ABI carries "
                           f"[{bounds[0]}, {bounds[1]}]")
    return value


def _c_text(value, name):
    """A name the C ABI can carry: a str of UTF-8 text without NUL (ctypes
    would cut it there), of a sane length."""
    if not isinstance(value, str):
        raise FulcrumError("invalid_argument", f"{name} is {_input_file.shown(value, 60)}; give "
                           "a name (a str)")
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError:
        encoded = None
    if encoded is None or b"\0" in encoded or not encoded or len(encoded) > 4096:
        raise FulcrumError("invalid_argument", f"{name} {_input_file.shown(value, 60)} is not a "
                           "name: give non-empty UTF-8 text without NUL bytes, at most 4096 bytes")
    return value


def _member_weights(values, members):
    """Member weights (ABI 1.5) as a float64 array: one per member, each
    finite and >= 0, their sum finite and > 0; None stays None."""
    if values is None:
        return None
    try:
        raw = np.asarray(values)
        odd = _not_numbers(raw)
        array = None if odd else raw.astype(np.float64)
    except (TypeError, ValueError, OverflowError, RecursionError, MemoryError) as error:
        raise FulcrumError("invalid_argument", f"member_weights is not a list of numbers: "
                           f"{type(error).__name__}: {error}") from None
    if odd:
        # NumPy would read the text '1' and True as 1.0: a caller's mix-up
        # (weights read as text, a boolean mask) planned silently.
        raise FulcrumError("invalid_argument", f"member_weights holds "
                           f"{_input_file.shown(odd[0], 60)} of type {type(odd[0]).__name__}; "
                           "give one number per member (int or float)")
    if array.ndim != 1 or array.size != members:
        raise FulcrumError("invalid_argument", f"member_weights has shape {array.shape} for "
                           f"{members} members; give one weight per member, or none")
    bad = np.flatnonzero(~np.isfinite(array) | (array < 0))
    if bad.size:
        raise FulcrumError("invalid_argument", f"member weight {int(bad[0])} is "
                           f"{float(array[bad[0]])!r}; each weight must be finite and >= 0")
    with np.errstate(over="ignore"):  # an overflowing sum is refused below, not warned about
        total = float(array.sum())
    if not (np.isfinite(total) and total > 0):
        raise FulcrumError("invalid_argument", f"member weights sum to {total!r}; their sum "
                           "must be finite and > 0")
    return np.ascontiguousarray(array)


def _not_numbers(array):
    """The entries of ``array`` that are not real numbers (text, bytes,
    bools, complex, None, containers), in order; [] when all are."""
    if array.dtype.kind in "iuf":
        return []
    entries = array.ravel().tolist()
    if array.dtype.kind != "O":
        return entries[:1]
    return [v for v in entries if isinstance(v, bool) or not isinstance(v, numbers.Real)]


def _int64_array(values, name):
    if isinstance(values, (str, bytes, dict)) or values is None:
        raise FulcrumError("invalid_argument", f"{name} is {_input_file.shown(values, 60)}; give "
                           "a flat list of integers")
    try:
        array = np.asarray(values)
    except (TypeError, ValueError, OverflowError, RecursionError, MemoryError) as error:
        raise FulcrumError("invalid_argument", f"{name} is not a list of integers: "
                           f"{type(error).__name__}: {error}") from None
    if array.ndim != 1:
        raise FulcrumError("invalid_argument",
                           f"{name} has shape {array.shape}; give a flat list of integers")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise FulcrumError("invalid_argument",
                           f"{name} has {array.dtype} entries; give integers")
    if array.size and array.dtype == np.uint64 and int(array.max()) > np.iinfo(np.int64).max:
        raise FulcrumError("invalid_argument", f"{name} has entries beyond int64")
    return np.ascontiguousarray(array, dtype=np.int64)
