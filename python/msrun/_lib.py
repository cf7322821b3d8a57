"""Finds and loads libmsrun.so and declares every C call the package makes.

Where the library comes from, first found wins:

1. ``MSRUN_LIBRARY``: a path (or a name for the dynamic loader). When set,
   nothing else is tried, so a wrong value fails instead of loading another
   copy.
2. Next to the package when it was installed with the library
   (``cmake --install``, the Debian package): ``_install.py``, written by
   the install, holds the library's path relative to the package.
3. The dynamic loader's own search: ``libmsrun.so.<major>`` (the soname),
   then what ``ctypes.util.find_library("msrun")`` finds, then
   ``libmsrun.so``.

msrun sets MSRUN_LIBRARY (and PYTHONPATH) for its workers, to the library
and package beside it. Without msrun, from a build tree:
``PYTHONPATH=python MSRUN_LIBRARY=build/lib/libmsrun.so``.
"""

import ctypes
import ctypes.util
import os

# libmsrun's soname major version (include/msrun/base.h, MSR_VERSION_MAJOR)
SONAME_MAJOR = 0


def _candidates():
    env = os.environ.get("MSRUN_LIBRARY")
    if env:
        return [env]
    names = []
    try:
        from . import _install  # pylint: disable=import-outside-toplevel
    except ImportError:
        _install = None
    if _install is not None:
        here = os.path.dirname(os.path.abspath(__file__))
        names.append(os.path.normpath(os.path.join(here, _install.LIBRARY)))
    names.append("libmsrun.so.%d" % SONAME_MAJOR)
    found = ctypes.util.find_library("msrun")
    if found:
        names.append(found)
    names.append("libmsrun.so")
    return names


def _load():
    tried = []
    for name in _candidates():
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            tried.append("%s (%s)" % (name, e))
    raise ImportError(
        "msrun: cannot load libmsrun: tried "
        + "; ".join(tried)
        + ". Set MSRUN_LIBRARY to the library's path (from a build tree: "
        "MSRUN_LIBRARY=build/lib/libmsrun.so)"
    )


lib = _load()
path = getattr(lib, "_name", "")

# free(3) from the process's C library, for the memory libmsrun hands over
# (msr_store_get, msr_ckpt_load): the same allocator libmsrun used
_libc = ctypes.CDLL(None)
free = _libc.free
free.argtypes = [ctypes.c_void_p]
free.restype = None

c_int = ctypes.c_int
c_int64 = ctypes.c_int64
c_uint32 = ctypes.c_uint32
c_uint64 = ctypes.c_uint64
c_size_t = ctypes.c_size_t
c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
c_unsigned = ctypes.c_uint
P = ctypes.POINTER
status_t = ctypes.c_int  # msr_status_t


class GatherResult(ctypes.Structure):
    """msr_gather_result_t."""

    _fields_ = [
        ("count", c_uint32),
        ("lengths", P(c_size_t)),
        ("offsets", P(c_size_t)),
        ("data", P(ctypes.c_ubyte)),
    ]


class Scalar(ctypes.Structure):
    """msr_scalar_t: a named value of a report."""

    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_double)]


# name: (restype, argtypes). Opaque handles (msr_ctx_t *, msr_comm_t *,
# msr_comm_req_t *) are void pointers.
_PROTOTYPES = {
    # base.h
    "msr_status_str": (c_char_p, [status_t]),
    "msr_status_name": (c_char_p, [status_t]),
    "msr_last_error": (c_char_p, []),
    "msr_version": (c_char_p, []),
    "msr_log_set_level": (None, [c_int]),
    # store.h
    "msr_init": (status_t, [P(c_void_p)]),
    "msr_finalize": (None, [c_void_p]),
    "msr_rank": (c_int, [c_void_p]),
    "msr_world_size": (c_int, [c_void_p]),
    "msr_local_rank": (c_int, [c_void_p]),
    "msr_local_world_size": (c_int, [c_void_p]),
    "msr_node_rank": (c_int, [c_void_p]),
    "msr_node_count": (c_int, [c_void_p]),
    "msr_generation": (c_int, [c_void_p]),
    "msr_job_id": (c_char_p, [c_void_p]),
    "msr_set_timeout": (None, [c_void_p, c_int64]),
    "msr_timeout": (c_int64, [c_void_p]),
    "msr_heartbeat": (None, [c_void_p]),
    "msr_note_peer_lost": (None, [c_void_p]),
    "msr_store_set": (status_t, [c_void_p, c_char_p, c_void_p, c_size_t]),
    "msr_store_get": (status_t, [c_void_p, c_char_p, c_int64, P(c_void_p), P(c_size_t)]),
    "msr_store_add": (status_t, [c_void_p, c_char_p, c_int64, P(c_int64)]),
    "msr_store_compare_set": (
        status_t,
        [c_void_p, c_char_p, c_void_p, c_size_t, c_void_p, c_size_t, P(c_int)],
    ),
    "msr_store_delete": (status_t, [c_void_p, c_char_p, P(c_int)]),
    "msr_store_num_keys": (status_t, [c_void_p, P(c_uint64)]),
    "msr_store_wait_change": (
        status_t,
        [c_void_p, c_char_p, c_void_p, c_size_t, c_int64, P(c_void_p), P(c_size_t)],
    ),
    "msr_store_barrier": (status_t, [c_void_p, c_char_p, c_uint32, c_uint32, c_int64]),
    "msr_report": (status_t, [c_void_p, c_int64, ctypes.c_double, P(Scalar), c_size_t]),
    "msr_store_allgather": (
        status_t,
        [
            c_void_p,
            c_char_p,
            c_uint32,
            c_uint32,
            c_uint32,
            c_void_p,
            c_size_t,
            c_int64,
            P(P(GatherResult)),
        ],
    ),
    "msr_gather_result_free": (None, [P(GatherResult)]),
    "msr_store_publish": (status_t, [c_void_p, c_char_p, c_uint32, c_uint32, c_void_p, c_size_t]),
    "msr_store_fetch": (
        status_t,
        [c_void_p, c_char_p, c_uint32, P(c_uint32), c_int64, P(P(GatherResult))],
    ),
    "msr_barrier": (status_t, [c_void_p]),
    "msr_allgather": (status_t, [c_void_p, c_void_p, c_size_t, c_void_p]),
    # checkpoint.h
    "msr_ckpt_save": (status_t, [c_void_p, c_char_p, c_int64, c_void_p, c_size_t, c_int]),
    "msr_ckpt_latest": (status_t, [c_void_p, c_char_p, P(c_int64)]),
    "msr_ckpt_load": (status_t, [c_void_p, c_char_p, c_int64, P(c_void_p), P(c_size_t)]),
    "msr_ckpt_latest_any": (status_t, [c_void_p, c_char_p, P(c_int64), P(c_int)]),
    "msr_ckpt_load_rank": (
        status_t,
        [c_void_p, c_char_p, c_int64, c_int, P(c_void_p), P(c_size_t)],
    ),
    # comm.h
    "msr_dtype_size": (c_size_t, [c_int]),
    "msr_dtype_name": (c_char_p, [c_int]),
    "msr_op_name": (c_char_p, [c_int]),
    "msr_comm_world": (status_t, [c_void_p, P(c_void_p)]),
    "msr_comm_split": (status_t, [c_void_p, c_int, c_int, P(c_void_p)]),
    "msr_comm_dup": (status_t, [c_void_p, c_unsigned, P(c_void_p)]),
    "msr_comm_pairs": (status_t, [c_void_p, c_int, P(c_int), P(c_void_p)]),
    "msr_comm_destroy": (None, [c_void_p]),
    "msr_comm_rank": (c_int, [c_void_p]),
    "msr_comm_size": (c_int, [c_void_p]),
    "msr_comm_world_rank": (c_int, [c_void_p, c_int]),
    "msr_comm_set_timeout": (None, [c_void_p, c_int64]),
    "msr_comm_timeout": (c_int64, [c_void_p]),
    "msr_comm_status": (status_t, [c_void_p]),
    "msr_comm_backend": (c_char_p, [c_void_p]),
    # the collectives and point-to-point calls: their non-blocking msr_comm_i*
    # twins take the same arguments and a request pointer last (_BLOCKING)
    "msr_comm_wait": (status_t, [c_void_p]),
    "msr_comm_test": (status_t, [P(c_void_p)]),
}

# comm.h's blocking calls; each has an msr_comm_i<name> with the same
# arguments and msr_comm_req_t ** last.
_BLOCKING = {
    "allreduce": [c_void_p, c_void_p, c_void_p, c_uint64, c_int, c_int],
    "reduce_scatter": [c_void_p, c_void_p, c_void_p, c_uint64, c_int, c_int],
    "allgather": [c_void_p, c_void_p, c_void_p, c_uint64, c_int],
    "broadcast": [c_void_p, c_void_p, c_uint64, c_int, c_int],
    "reduce": [c_void_p, c_void_p, c_void_p, c_uint64, c_int, c_int, c_int],
    "alltoall": [c_void_p, c_void_p, c_void_p, c_uint64, c_int],
    "alltoallv": [
        c_void_p,
        c_void_p,
        P(c_uint64),
        P(c_uint64),
        c_void_p,
        P(c_uint64),
        P(c_uint64),
        c_int,
    ],
    "barrier": [c_void_p],
    "send": [c_void_p, c_void_p, c_uint64, c_int, c_int, c_int],
    "recv": [c_void_p, c_void_p, c_uint64, c_int, c_int, c_int],
    "recv_any": [c_void_p, c_void_p, c_uint64, c_int, c_int, P(c_int)],
}
for _op, _args in _BLOCKING.items():
    _PROTOTYPES["msr_comm_" + _op] = (status_t, _args)
    _PROTOTYPES["msr_comm_i" + _op] = (status_t, _args + [P(c_void_p)])
del _op

for _name, (_res, _args) in _PROTOTYPES.items():
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args
del _name, _res, _args, _fn
