"""libmsrun from Python: ctypes over libmsrun.so, nothing compiled.

    import msrun
    ctx = msrun.init()                  # msr_init: the job msrun started
    ctx.rank, ctx.world_size
    ctx.store_set("k", b"v"); ctx.store_get("k", wait_ms=5000)
    ctx.allreduce(array)                # in place, over the world communicator
    ctx.finalize()

Every method is named after the C call it makes (msr_store_get is
ctx.store_get, msr_comm_allreduce is comm.allreduce); docs/python.md has the
list. A failed call raises msrun.Error (or a subclass) carrying the status's
name and msr_last_error()'s sentence. Threads: as the C calls (ctypes lets
go of the GIL while libmsrun runs).

The package's code is in private modules, every name of them that users
see imported here: _lib (loading libmsrun, the C prototypes), _errors
(msrun.Error and its subclasses), _buffers (what a buffer may be), _args
(keys, paths and bytes to and from the C calls), _context (init, Context:
the store, checkpoints, reports), _comm (Comm: the collectives and
point-to-point, their arguments checked) and _request (Request, wait_all).
"""

from . import _lib
# Buffer, counts_array, parse_op and the COMM_* flags are not in __all__ but
# were always the package's names (tests/python/test_unit.py holds the list)
from ._buffers import DTYPES, OPS, Buffer, counts_array, parse_op  # noqa: F401
from ._comm import COMM_NO_COLOR, COMM_OWN_WORKER, Comm  # noqa: F401
from ._context import Context, init
from ._errors import (
    CorruptError,
    Error,
    InvalidArgumentError,
    NotFoundError,
    PeerLostError,
    StaleError,
    TimeoutError,  # pylint: disable=redefined-builtin
    status_name,
    status_str,
)
from ._request import Request, wait_all

__all__ = [
    "init",
    "Context",
    "Comm",
    "Request",
    "wait_all",
    "Error",
    "TimeoutError",
    "NotFoundError",
    "InvalidArgumentError",
    "StaleError",
    "PeerLostError",
    "CorruptError",
    "version",
    "library_path",
    "log_set_level",
    "status_name",
    "status_str",
    "DTYPES",
    "OPS",
    "IN_PLACE",
]

_L = _lib.lib

IN_PLACE = "in place"  # documentation only: pass one buffer for in place

# the classes and functions of the private modules, named as the package's
# own (repr, help, pickle), as they were before the package was split
for _obj in (Context, init, Comm, Request, wait_all):
    _obj.__module__ = "msrun"
del _obj

_LOG_LEVELS = {"error": 0, "warn": 1, "info": 2, "debug": 3, "trace": 4}


def version():
    """libmsrun's version (msr_version of the library loaded)."""
    return _L.msr_version().decode()


def library_path():
    """The file or name the package loaded libmsrun from."""
    return _lib.path


def log_set_level(level):
    """msr_log_set_level: 'error', 'warn', 'info', 'debug', 'trace' (or 0..4).
    Process-wide; msr_init reads MSR_LOG_LEVEL again, so call it after init
    to override the variable."""
    if isinstance(level, str):
        try:
            level = _LOG_LEVELS[level.lower()]
        except KeyError:
            raise ValueError(
                "msrun: unknown log level %r (one of %s)" % (level, ", ".join(_LOG_LEVELS))
            ) from None
    _L.msr_log_set_level(int(level))
