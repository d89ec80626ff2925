"""A loaded balancer plugin, called through the C ABI of include/fulcrum/c_api.h.

Lifetimes follow the header: the library stays loaded for the life of the
process once opened (ctypes cannot unload it safely while function pointers
may be held); the plugin instance lives from ``load`` until ``close`` (or
garbage collection); a plan's buffers are the plugin's until ``release_plan``,
which is called exactly once for every FULCRUM_OK, after the copy into NumPy.
One instance is used by one thread at a time: every call holds the
balancer's lock, and ``last_error`` is read under the same lock as the call
it describes.
"""

import ctypes
import logging
import threading

from . import _abi
from . import loader
from ._c_values import _MAX_TEXT_BYTES, _address, _checked_text, _printable_text
from .cp_plan import CpPlan, CpPlanning, Imbalance, RankWork
from .dp_partition import DEFAULT_ATTENTION_A, DpPartition, DpPartitioning, parse_cost
from .errors import FulcrumError
from .schedule_call import Scheduling

__all__ = ["Balancer", "CpPlan", "DEFAULT_ATTENTION_A", "DpPartition", "Imbalance", "RankWork",
           "load", "parse_cost"]

_LOG = logging.getLogger("fulcrum")
_LOG_LEVELS = {
    _abi.LOG_DEBUG: logging.DEBUG,
    _abi.LOG_INFO: logging.INFO,
    _abi.LOG_WARNING: logging.WARNING,
    _abi.LOG_ERROR: logging.ERROR,
}


class Balancer(CpPlanning, Scheduling, DpPartitioning):
    """A plugin loaded and checked, with one instance. Use ``load`` to make one.

    Usable as a context manager; ``close`` destroys the instance."""

    def __init__(self, library, table, path):
        self._library = library  # keeps the code of every pointer below alive
        self._table = table
        self.path = path
        # _check_table has checked every name (UTF-8, no control character).
        self.name = table.name.decode("utf-8")
        self.abi_version = (table.abi_major, table.abi_minor)
        self.cp_strategies = [table.cp_strategies[i].decode("utf-8")
                              for i in range(table.num_cp_strategies)]
        self.dp_strategies = [table.dp_strategies[i].decode("utf-8")
                              for i in range(table.num_dp_strategies)]
        # ABI 1.1's scheduler, when the plugin's table has one (_check_table
        # returns the longer view only then).
        has_scheduler = isinstance(table, _abi.PluginTableV1_1) and bool(table.schedule)
        self.schedule_strategies = [
            table.schedule_strategies[i].decode("utf-8")
            for i in range(table.num_schedule_strategies)] if has_scheduler else []
        self._has_scheduler = has_scheduler
        self._lock = threading.Lock()
        self._instance = None
        self._log_callback = _abi.LogFn(self._forward_log)
        self._services = _abi.HostServices(ctypes.sizeof(_abi.HostServices), None,
                                           self._log_callback)
        raw = ctypes.c_void_p()
        status = table.create(ctypes.byref(self._services), ctypes.byref(raw))
        if status != _abi.OK or not raw.value:
            if status == _abi.OK:
                raise FulcrumError("internal", f"plugin {self.name!r} ({path}) returned no "
                                   "instance from create(); fix the plugin")
            raise FulcrumError("internal", f"plugin {self.name!r} ({path}) failed to create an "
                               f"instance (status {status}); see its log, or run its own tests")
        self._instance = raw

    # -- lifetime -----------------------------------------------------------

    def close(self):
        """Destroys the plugin instance; later calls raise FulcrumError."""
        with self._lock:
            if self._instance is not None:
                instance, self._instance = self._instance, None
                self._table.destroy(instance)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_instance", None) is not None:
            self._table.destroy(self._instance)
            self._instance = None

    def __repr__(self):
        return (f"Balancer(name={self.name!r}, path={self.path!r}, "
                f"abi={self.abi_version[0]}.{self.abi_version[1]})")

    def _live_instance(self):
        if self._instance is None:
            raise FulcrumError("invalid_argument",
                               f"balancer {self.name!r} is closed; load the plugin again")
        return self._instance

    def _forward_log(self, _user_data, level, message):
        try:
            text = _printable_text(message, _MAX_TEXT_BYTES) if message else ""
            _LOG.log(_LOG_LEVELS.get(level, logging.WARNING), "plugin '%s': %s", self.name, text)
        except Exception:  # noqa: BLE001 - nothing may unwind into the plugin's C frames
            pass

    def _check_lent(self, lent, kind, strategy):
        """Raises FulcrumError when the plugin wrote into what it was lent."""
        changed = lent.changed()
        if changed is not None:
            raise FulcrumError("internal", f"plugin {self.name!r} {kind} {strategy!r} wrote into "
                               f"{changed}, which the host lent it read-only; the answer is "
                               f"refused and the caller's data kept; fix the plugin ({self.path})")

    def _answer_text(self, pointer, limit, bad, field):
        """Text a plugin answered with, refused unless it is what the ABI
        promises; None for NULL."""
        address = _address(pointer)
        if not address:
            return None
        text, why = _checked_text(address, limit)
        if why is not None:
            raise FulcrumError("internal", bad + f"{field} {why}; fix the plugin ({self.path})")
        return text

    def _failure(self, status, strategy):
        """The plugin's last_error as a FulcrumError; call with the lock held."""
        raw = self._table.last_error(self._instance)
        # Shown, not refused: escaped to one line whatever it holds.
        said = _printable_text(raw, _MAX_TEXT_BYTES) if raw else ""
        said = said or "failed without a message"
        code = _abi.STATUS_NAMES.get(status)
        if code is None or code == "ok":
            code, said = "internal", f"{said} (unknown status {status})"
        return FulcrumError(code, f"plugin {self.name!r} strategy {strategy!r}: {said}")


def load(name_or_path=loader.DEFAULT_PLUGIN, *, search_dirs=None, check_permissions=True):
    """Loads a plugin by name (searched in ``search_dirs``, else
    $FULCRUM_PLUGIN_PATH, this checkout's build, the recorded install
    directories, <sys.prefix>/lib/fulcrum and /usr/local/lib/fulcrum: see
    loader.default_search_dirs) or by path (contains '/'), with the host's
    checks: the file and every directory above it owned by root or this user
    and not writable by group or others, a complete ELF file,
    dlopen(RTLD_NOW | RTLD_LOCAL), the table checked field by field, an
    instance created. Raises FulcrumError naming what was refused and why."""
    library, table, path = loader.open_plugin(name_or_path, search_dirs, check_permissions)
    return Balancer(library, table, path)
