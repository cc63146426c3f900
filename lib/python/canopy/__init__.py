"""canopy: rank information, phase marks, PMIx exchange and the job store, for programs started by canopy.

A thin ctypes layer over libcanopy.so (canopy/canopy.h); every call goes to the C library. Failures raise
CanopyError (or a subclass) carrying the library's status code and its one-line message. The rank
information also works under torchrun, mpirun, mpiexec.hydra, srun and PALS (mode() names the launcher).
`canopy.torch` (torch.distributed on canopy's store) is imported on first use, so `import canopy` alone
never imports torch.

    import canopy
    with canopy.phase("imports"):
        import torch
    print(canopy.rank(), "of", canopy.size(), "on", canopy.node_name())
    canopy.mark("model_built")
"""

import contextlib
import ctypes
import ctypes.util
import importlib
import logging
import math
import os
import time
import warnings

# The package's release; tests check it against meson.build's project version.
__version__ = "0.1.0"

__all__ = [
    "CanopyError", "KeyNotFoundError", "CanopyTimeoutError", "NotAvailableError",
    "init", "finalize", "mode", "rank", "size", "local_rank", "local_size", "node_rank", "num_nodes",
    "node_name", "mark", "mark_duration", "phase", "process_seconds", "put", "commit", "fence", "get", "barrier", "allgather",
    "store_available", "store_set", "store_get", "store_add", "store_compare_set", "store_check",
    "store_delete", "store_num_keys", "store_wait",
]



class CanopyError(RuntimeError):
    """A libcanopy call failed; `status` is the CANOPY_ERR_* code, str() the library's message."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class KeyNotFoundError(CanopyError):
    """The key does not exist (a get that does not wait)."""


class CanopyTimeoutError(CanopyError, TimeoutError):
    """A wait ended before the keys appeared, or the daemon did not answer."""


class NotAvailableError(CanopyError):
    """A canopy-only feature (the store) used outside canopy."""




def _candidates():
    """Where libcanopy.so may be, in the order tried. CANOPY_LIBRARY, when set, is the only candidate: a user
    who names a library must not silently get another copy."""
    named = os.environ.get("CANOPY_LIBRARY")
    if named:
        yield named
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libcanopy.so")
    try:
        from canopy import _build_config   # written by meson when it installs the package
        yield os.path.join(_build_config.LIBDIR, "libcanopy.so.0")
    except ImportError:
        pass
    # Installed canopy as the dynamic loader finds it (LD_LIBRARY_PATH, ld.so.cache): what a package that pip
    # installed relies on.
    yield "libcanopy.so.0"
    found = ctypes.util.find_library("canopy")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path} (missing)")
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as error:
            tried.append(f"{path} ({error})")
    hint = ("fix or unset CANOPY_LIBRARY" if os.environ.get("CANOPY_LIBRARY")
            else "set CANOPY_LIBRARY to its path, or install canopy (meson install)")
    raise ImportError("canopy: cannot load libcanopy.so; tried: " + "; ".join(tried or ["nothing found"]) +
                      f"; {hint}")


_lib = _load()

_c_int, _c_size, _c_void_p, _c_char_p = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p
_P = ctypes.POINTER
_SIGNATURES = {
    "canopy_init": ([], _c_int),
    "canopy_finalize": ([], _c_int),
    "canopy_last_error": ([], _c_char_p),
    "canopy_status_string": ([_c_int], _c_char_p),
    "canopy_status_name": ([_c_int], _c_char_p),
    "canopy_mode_name": ([_c_int], _c_char_p),
    "canopy_mode": ([], _c_int),
    "canopy_rank": ([], _c_int),
    "canopy_size": ([], _c_int),
    "canopy_local_rank": ([], _c_int),
    "canopy_local_size": ([], _c_int),
    "canopy_node_rank": ([], _c_int),
    "canopy_num_nodes": ([], _c_int),
    "canopy_node_name": ([], _c_char_p),
    "canopy_mark": ([_c_char_p], _c_int),
    "canopy_mark_duration": ([_c_char_p, ctypes.c_int64], _c_int),
    "canopy_put": ([_c_char_p, _c_char_p, _c_size], _c_int),
    "canopy_commit": ([], _c_int),
    "canopy_fence": ([], _c_int),
    "canopy_get": ([_c_int, _c_char_p, _P(_c_void_p), _P(_c_size)], _c_int),
    "canopy_barrier": ([], _c_int),
    "canopy_allgather": ([_c_char_p, _c_size, _P(_c_void_p), _P(_c_size)], _c_int),
    "canopy_store_set": ([_c_char_p, _c_char_p, _c_size], _c_int),
    "canopy_store_get": ([_c_char_p, _c_int, _P(_c_void_p), _P(_c_size)], _c_int),
    "canopy_store_add": ([_c_char_p, ctypes.c_int64, _P(ctypes.c_int64)], _c_int),
    "canopy_store_compare_set": ([_c_char_p, _c_char_p, _c_size, _c_char_p, _c_size, _P(_c_void_p), _P(_c_size)],
                                 _c_int),
    "canopy_store_check": ([_P(_c_char_p), _c_size, _P(_c_int)], _c_int),
    "canopy_store_delete": ([_c_char_p, _P(_c_int)], _c_int),
    "canopy_store_num_keys": ([_P(ctypes.c_int64)], _c_int),
    "canopy_store_wait": ([_P(_c_char_p), _c_size, _c_int], _c_int),
    "canopy_free": ([_c_void_p], None),
}
for _name, (_args, _result) in _SIGNATURES.items():
    _function = getattr(_lib, _name)
    _function.argtypes = _args
    _function.restype = _result


def _names(name_of):
    """{name: code} for codes 0, 1, ... until libcanopy has no name: the numbers are canopy.h's, never copied."""
    names, code = {}, 0
    while (name := name_of(code)) is not None:
        names[name.decode()] = code
        code += 1
    return names


_STATUS = _names(_lib.canopy_status_name)
OK = _STATUS["CANOPY_OK"]
ERR_NOT_FOUND = _STATUS["CANOPY_ERR_NOT_FOUND"]
ERR_TIMEOUT = _STATUS["CANOPY_ERR_TIMEOUT"]
ERR_NOT_AVAILABLE = _STATUS["CANOPY_ERR_NOT_AVAILABLE"]
ERR_INVALID = _STATUS["CANOPY_ERR_INVALID"]
ERR_NOT_INITIALIZED = _STATUS["CANOPY_ERR_NOT_INITIALIZED"]
ERR_PMIX = _STATUS["CANOPY_ERR_PMIX"]
ERR_DAEMON = _STATUS["CANOPY_ERR_DAEMON"]
ERR_NO_MEMORY = _STATUS["CANOPY_ERR_NO_MEMORY"]
_MODES = {code: name for name, code in _names(_lib.canopy_mode_name).items()}
WAIT_FOREVER = -1   # CANOPY_WAIT_FOREVER: a timeout, not a code

_ERRORS = {ERR_NOT_FOUND: KeyNotFoundError, ERR_TIMEOUT: CanopyTimeoutError, ERR_NOT_AVAILABLE: NotAvailableError}


def _check(status):
    if status != OK:
        message = (_lib.canopy_last_error() or b"").decode(errors="replace")
        raise _ERRORS.get(status, CanopyError)(status, message or _lib.canopy_status_string(status).decode())


def _bytes(value, what="value"):
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (list, tuple)):   # torch passes compare_set values as lists of byte values
        return bytes(value)
    raise TypeError(f"canopy: {what} must be bytes or str, not {type(value).__name__}")


def _key(key):
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode()
    raise TypeError(f"canopy: a key must be str or bytes, not {type(key).__name__}")


def _taken(pointer, length):
    """Copies a buffer libcanopy handed out and frees it."""
    try:
        return ctypes.string_at(pointer.value, length.value) if length.value else b""
    finally:
        _lib.canopy_free(pointer)


def _timeout_ms(timeout):
    """None: wait as long as it takes; 0: do not wait; seconds (float or timedelta) otherwise."""
    if timeout is None:
        return WAIT_FOREVER
    if hasattr(timeout, "total_seconds"):
        timeout = timeout.total_seconds()
    if timeout < 0:
        raise ValueError(f"canopy: timeout {timeout} s is negative")
    return min(math.ceil(timeout * 1000), 2**31 - 1)   # a positive timeout never becomes "do not wait"


# --- life cycle and rank information ------------------------------------------------------------------

def init():
    """Starts libcanopy (every other call does it on demand); raises if this process's launcher is broken."""
    _check(_lib.canopy_init())


def finalize():
    """Disconnects from PMIx and the daemon; also done at exit."""
    _check(_lib.canopy_finalize())


def mode():
    """Who started this process: "canopy", "torchrun", "open-mpi", "hydra", "slurm", "pals", "pmix" (another
    PMIx launcher) or "singleton"."""
    _check(_lib.canopy_init())
    return _MODES.get(_lib.canopy_mode(), "none")


def _query(function):
    value = function()
    if value < 0:
        _check(_lib.canopy_init())
    return value


def rank():
    return _query(_lib.canopy_rank)


def size():
    return _query(_lib.canopy_size)


def local_rank():
    return _query(_lib.canopy_local_rank)


def local_size():
    return _query(_lib.canopy_local_size)


def node_rank():
    return _query(_lib.canopy_node_rank)


def num_nodes():
    return _query(_lib.canopy_num_nodes)


def node_name():
    name = _lib.canopy_node_name()
    if name is None:
        _check(_lib.canopy_init())
    return name.decode(errors="replace")


# --- phase marks ----------------------------------------------------------------------------------------

_mark_warned = False
_marks_explained = False
_log = logging.getLogger("canopy")


def _explain_marks():
    """Says once, at debug level, that marks go nowhere outside canopy (each returns at once)."""
    global _marks_explained
    _marks_explained = True
    started_by = mode()
    if started_by != "canopy":
        _log.debug("canopy: marks are dropped without any I/O: this process was started by %s, not canopy",
                   started_by)


def _check_mark(status):
    """A bad name raises; a lost daemon connection only warns (once): timing must not stop the training."""
    global _mark_warned
    if not _marks_explained:
        _explain_marks()
    if status == ERR_DAEMON:
        if not _mark_warned:
            _mark_warned = True
            message = (_lib.canopy_last_error() or b"").decode(errors="replace")
            warnings.warn(f"canopy: marks are not recorded: {message}", RuntimeWarning, stacklevel=3)
        return
    _check(status)


def mark(name):
    """Stamps "this rank reached NAME now" (phase app.NAME in canopy's timing report); dropped outside canopy."""
    _check_mark(_lib.canopy_mark(_key(name)))


def mark_duration(name, seconds):
    """Stamps a phase NAME that ends now and lasted `seconds` (phases app.NAME and app.NAME.duration)."""
    _check_mark(_lib.canopy_mark_duration(_key(name), int(seconds * 1e9)))


def process_seconds():
    """How long this process has been running: since the kernel started it (Linux, to within a clock tick, 10 ms),
    so `canopy.mark_duration("interpreter", canopy.process_seconds())` right after `import canopy` times Python's own
    start-up, which no `phase` block can cover. 0.0 where /proc is not there."""
    try:
        with open("/proc/self/stat") as stat:
            # Field 22, after the command name in parentheses (which may hold spaces): start time in ticks since boot.
            started_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started_ticks / os.sysconf("SC_CLK_TCK"))


class phase(contextlib.ContextDecorator):
    """`with canopy.phase("imports"): ...` sends one mark with the block's duration when the block ends
    normally (a block that raises is not stamped). Also works as a decorator."""

    def __init__(self, name):
        self.name = name
        _key(name)

    def __enter__(self):
        self._started = time.monotonic_ns()
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None:
            _check_mark(_lib.canopy_mark_duration(_key(self.name), time.monotonic_ns() - self._started))
        return False


# --- PMIx exchange ----------------------------------------------------------------------------------------

def put(key, value):
    data = _bytes(value)
    _check(_lib.canopy_put(_key(key), data, len(data)))


def commit():
    _check(_lib.canopy_commit())


def fence():
    """Collective over all ranks; afterwards values committed before it are readable with get()."""
    _check(_lib.canopy_fence())


def get(rank, key):   # noqa: F811 (the argument shadows rank() only inside this function)
    """The bytes `rank` put under `key` before the last fence."""
    pointer, length = _c_void_p(), _c_size()
    _check(_lib.canopy_get(rank, _key(key), ctypes.byref(pointer), ctypes.byref(length)))
    return _taken(pointer, length)


def barrier():
    _check(_lib.canopy_barrier())


def allgather(data):
    """Collective: every rank's bytes, as a list in rank order (lengths may differ)."""
    data = _bytes(data)
    count = size()
    pointer, lens = _c_void_p(), (_c_size * count)()
    _check(_lib.canopy_allgather(data, len(data), ctypes.byref(pointer), lens))
    try:
        joined = ctypes.string_at(pointer.value, sum(lens)) if sum(lens) else b""
    finally:
        _lib.canopy_free(pointer)
    parts, offset = [], 0
    for length in lens:
        parts.append(joined[offset:offset + length])
        offset += length
    return parts


# --- the job-wide store -------------------------------------------------------------------------------------

def store_available():
    """True under canopy (with its daemon's socket) and in a singleton; False under another launcher."""
    try:
        store_num_keys()
        return True
    except NotAvailableError:
        return False


def store_set(key, value):
    data = _bytes(value)
    _check(_lib.canopy_store_set(_key(key), data, len(data)))


def store_get(key, timeout=None):
    """The value of `key`; waits up to `timeout` seconds for it (None: no limit, 0: KeyNotFoundError at once)."""
    pointer, length = _c_void_p(), _c_size()
    _check(_lib.canopy_store_get(_key(key), _timeout_ms(timeout), ctypes.byref(pointer), ctypes.byref(length)))
    return _taken(pointer, length)


def store_add(key, delta):
    """Adds `delta` to the integer at `key` (missing: 0) and returns the new value."""
    value = ctypes.c_int64()
    _check(_lib.canopy_store_add(_key(key), int(delta), ctypes.byref(value)))
    return value.value


def store_compare_set(key, expected, desired):
    """Sets `key` to `desired` if it holds `expected` (missing matches b""); returns the value after the call."""
    want, new = _bytes(expected, "expected"), _bytes(desired, "desired")
    pointer, length = _c_void_p(), _c_size()
    _check(_lib.canopy_store_compare_set(_key(key), want, len(want), new, len(new), ctypes.byref(pointer),
                                         ctypes.byref(length)))
    return _taken(pointer, length)


def _key_array(keys):
    if isinstance(keys, (str, bytes)):
        keys = [keys]
    encoded = [_key(key) for key in keys]
    return (_c_char_p * len(encoded))(*encoded), len(encoded)


def store_check(keys):
    """True if every key exists."""
    array, count = _key_array(keys)
    present = _c_int()
    _check(_lib.canopy_store_check(array, count, ctypes.byref(present)))
    return bool(present.value)


def store_delete(key):
    """Deletes `key`; True if it existed."""
    existed = _c_int()
    _check(_lib.canopy_store_delete(_key(key), ctypes.byref(existed)))
    return bool(existed.value)


def store_num_keys():
    count = ctypes.c_int64()
    _check(_lib.canopy_store_num_keys(ctypes.byref(count)))
    return count.value


def store_wait(keys, timeout=None):
    """Waits until every key exists (None: no limit); CanopyTimeoutError after `timeout` seconds."""
    array, count = _key_array(keys)
    _check(_lib.canopy_store_wait(array, count, _timeout_ms(timeout)))


def __getattr__(name):
    """`canopy.torch` on first use (PEP 562), so that `import canopy` never imports torch."""
    if name == "torch":
        return importlib.import_module("canopy.torch")
    raise AttributeError(f"module 'canopy' has no attribute {name!r}")
