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
"""

import atexit
import ctypes
import os
import threading
import weakref

from . import _lib
from ._buffers import DTYPES, OPS, Buffer, counts_array, parse_op
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
from ._errors import check as _check

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
_c = ctypes

# MSR_IN_PLACE of comm.h: a send buffer that means "the input is in recvbuf"
_IN_PLACE = _c.c_void_p(1)
IN_PLACE = "in place"  # documentation only: pass one buffer for in place

# MSR_ERR_NOT_FOUND of base.h
_NOT_FOUND = -9

# MSR_COMM_OWN_WORKER of comm.h
COMM_OWN_WORKER = 1
# MSR_COMM_NO_COLOR
COMM_NO_COLOR = -1

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


def _key(key):
    if isinstance(key, str):
        key = key.encode()
    elif isinstance(key, (bytes, bytearray)):
        key = bytes(key)
    else:
        raise TypeError("msrun: a key is a str or bytes, not %s" % type(key).__name__)
    # C reads a key up to its first NUL: "a\0b" would be the key "a"
    if b"\0" in key:
        raise ValueError("msrun: key %r contains a NUL byte" % key)
    return key


def _path(path):
    return os.fsencode(path)


def _gather_list(res):
    """The entries of a msr_gather_result_t as a list of bytes; frees it."""
    try:
        r = res.contents
        base = _c.addressof(r.data.contents) if r.count and r.data else 0
        return [
            _c.string_at(base + r.offsets[i], r.lengths[i]) if r.lengths[i] else b""
            for i in range(r.count)
        ]
    finally:
        _L.msr_gather_result_free(res)


def _bytes_in(value, what):
    """bytes-like (or str, as UTF-8) -> (keep-alive object, address, length)."""
    if isinstance(value, str):
        value = value.encode()
    if isinstance(value, bytes):
        return value, _c.cast(_c.c_char_p(value), _c.c_void_p), len(value)
    buf = Buffer(value, what, writable=False, dtype="u8")
    return buf, buf.address, buf.nbytes


def _take(ptr, length):
    """Copies length bytes at ptr into bytes and frees ptr (free(3))."""
    try:
        return _c.string_at(ptr, length) if length else b""
    finally:
        _lib.free(ptr)


# ---- the context -------------------------------------------------------


_live_contexts = weakref.WeakSet()


def init():
    """msr_init: joins the job the environment describes (under msrun: the
    job msrun started; without msrun: a job of one rank with a store in this
    process). Returns a Context; raises msrun.Error."""
    handle = _c.c_void_p()
    _check(_L.msr_init(_c.byref(handle)), "msr_init")
    return Context(handle)


class Context:
    """A worker's handle on its job (msr_ctx_t). Use init() to make one;
    finalize() (or a with block, or the end of the program) leaves the job,
    after destroying the communicators made from it."""

    def __init__(self, handle):
        self._h = handle
        self._comms = weakref.WeakSet()
        self._world = None
        self._lock = threading.Lock()
        _live_contexts.add(self)

    # -- life
    def _handle(self):
        if not self._h:
            raise Error(-3, "msrun", "the context was finalized")
        return self._h

    def finalize(self):
        """msr_finalize, after destroying every communicator made from this
        context that is still alive. Calling it twice does nothing."""
        with self._lock:
            if not self._h:
                return
            for comm in list(self._comms):
                comm.destroy()
            self._world = None
            h, self._h = self._h, None
        _L.msr_finalize(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.finalize()

    def __del__(self):
        try:
            self.finalize()
        except Exception:  # pylint: disable=broad-except
            pass

    def __repr__(self):
        if not self._h:
            return "<msrun.Context finalized>"
        return "<msrun.Context job %s rank %d of %d>" % (self.job_id, self.rank, self.world_size)

    # -- who and where
    @property
    def rank(self):
        return _L.msr_rank(self._handle())

    @property
    def world_size(self):
        return _L.msr_world_size(self._handle())

    @property
    def local_rank(self):
        return _L.msr_local_rank(self._handle())

    @property
    def local_world_size(self):
        return _L.msr_local_world_size(self._handle())

    @property
    def node_rank(self):
        return _L.msr_node_rank(self._handle())

    @property
    def node_count(self):
        return _L.msr_node_count(self._handle())

    @property
    def generation(self):
        """The restart round (0 at first start)."""
        return _L.msr_generation(self._handle())

    @property
    def job_id(self):
        return _L.msr_job_id(self._handle()).decode()

    @property
    def timeout(self):
        """msr_timeout: the default deadline of calls, in milliseconds (< 0:
        none). Settable (msr_set_timeout)."""
        return _L.msr_timeout(self._handle())

    @timeout.setter
    def timeout(self, ms):
        _L.msr_set_timeout(self._handle(), int(ms))

    def set_timeout(self, ms):
        """msr_set_timeout."""
        _L.msr_set_timeout(self._handle(), int(ms))

    def heartbeat(self):
        """msr_heartbeat: tells msrun this worker makes progress."""
        _L.msr_heartbeat(self._handle())

    def note_peer_lost(self):
        """msr_note_peer_lost: tells msrun a communication peer was lost (by
        torch.distributed, say), so that this worker's failure is not taken
        for the job's root cause."""
        _L.msr_note_peer_lost(self._handle())

    # -- the store
    def store_set(self, key, value):
        """Stores value (bytes-like, or str as UTF-8) under key."""
        keep, ptr, n = _bytes_in(value, "value")
        _check(_L.msr_store_set(self._handle(), _key(key), ptr, n), "msr_store_set")
        del keep

    def store_get(self, key, wait_ms=-1):
        """The value of key, as bytes. wait_ms 0: at once (NotFoundError when
        absent); > 0: waits that long for the key (TimeoutError); < 0 (the
        default): waits up to the context's timeout."""
        ptr = _c.c_void_p()
        n = _c.c_size_t()
        _check(
            _L.msr_store_get(self._handle(), _key(key), int(wait_ms), _c.byref(ptr), _c.byref(n)),
            "msr_store_get",
        )
        return _take(ptr, n.value)

    def store_add(self, key, delta=1):
        """Adds delta to the 64-bit counter at key; returns the new value."""
        v = _c.c_int64()
        _check(_L.msr_store_add(self._handle(), _key(key), int(delta), _c.byref(v)), "msr_store_add")
        return v.value

    def store_compare_set(self, key, expected, desired):
        """Replaces key's value with desired if it equals expected (None:
        only if the key is absent). Returns whether it did."""
        keep_d, dptr, dn = _bytes_in(desired, "desired")
        if expected is None:
            keep_e, eptr, en = None, None, 0
        else:
            keep_e, eptr, en = _bytes_in(expected, "expected")
        swapped = _c.c_int()
        _check(
            _L.msr_store_compare_set(
                self._handle(), _key(key), eptr, en, dptr, dn, _c.byref(swapped)
            ),
            "msr_store_compare_set",
        )
        del keep_d, keep_e
        return bool(swapped.value)

    def store_delete(self, key):
        """Removes key; returns whether it was there."""
        existed = _c.c_int()
        _check(_L.msr_store_delete(self._handle(), _key(key), _c.byref(existed)), "msr_store_delete")
        return bool(existed.value)

    def store_wait_change(self, key, old, wait_ms=-1):
        """msr_store_wait_change: waits for key to hold something other than
        old (bytes-like or str; None: the key was absent). Returns the new
        value as bytes, or None once the key is deleted. A write of the same
        value is no change. wait_ms as for store_get; TimeoutError when
        nothing changed within it."""
        if old is None:
            keep, optr, on = None, None, 0
        else:
            keep, optr, on = _bytes_in(old, "old")
        ptr = _c.c_void_p()
        n = _c.c_size_t()
        st = _L.msr_store_wait_change(
            self._handle(), _key(key), optr, on, int(wait_ms), _c.byref(ptr), _c.byref(n)
        )
        del keep
        if st == _NOT_FOUND and old is not None:
            return None
        _check(st, "msr_store_wait_change")
        return _take(ptr, n.value)

    def store_num_keys(self):
        """The keys the store holds in this generation (every one, msrun's
        own too)."""
        n = _c.c_uint64()
        _check(_L.msr_store_num_keys(self._handle(), _c.byref(n)), "msr_store_num_keys")
        return n.value

    def store_barrier(self, name, count=None, local_count=0, wait_ms=-1):
        """Waits until count participants (default: the world size) reached
        the barrier called name. local_count: how many of them run on this
        node (0: unknown)."""
        if count is None:
            count = self.world_size
        _check(
            _L.msr_store_barrier(self._handle(), _key(name), int(count), int(local_count), int(wait_ms)),
            "msr_store_barrier",
        )

    def store_allgather(self, name, data, index=None, count=None, local_count=0, wait_ms=-1):
        """Contributes data (bytes-like) as entry index (default: this rank)
        of the allgather called name, of count entries (default: the world
        size); returns every entry as a list of bytes, in index order."""
        if index is None:
            index = self.rank
        if count is None:
            count = self.world_size
        keep, ptr, n = _bytes_in(data, "data")
        res = _c.POINTER(_lib.GatherResult)()
        _check(
            _L.msr_store_allgather(
                self._handle(),
                _key(name),
                int(count),
                int(index),
                int(local_count),
                ptr,
                n,
                int(wait_ms),
                _c.byref(res),
            ),
            "msr_store_allgather",
        )
        del keep
        return _gather_list(res)

    def store_publish(self, name, data, index=None, local_count=0):
        """msr_store_publish: data (bytes-like) as entry index (default: this
        rank) of name, for others to fetch."""
        if index is None:
            index = self.rank
        keep, ptr, n = _bytes_in(data, "data")
        _check(
            _L.msr_store_publish(self._handle(), _key(name), int(index), int(local_count), ptr, n),
            "msr_store_publish",
        )
        del keep

    def store_fetch(self, name, indices, wait_ms=-1):
        """msr_store_fetch: the entries indices of name, as a list of bytes in
        the order asked, waiting up to wait_ms for them to be published."""
        idx = [int(i) for i in indices]
        arr = (_c.c_uint32 * max(len(idx), 1))(*idx)
        res = _c.POINTER(_lib.GatherResult)()
        _check(
            _L.msr_store_fetch(
                self._handle(), _key(name), len(idx), arr, int(wait_ms), _c.byref(res)
            ),
            "msr_store_fetch",
        )
        return _gather_list(res)

    def barrier(self):
        """msr_barrier: every rank of the job, matched by call order."""
        _check(_L.msr_barrier(self._handle()), "msr_barrier")

    def allgather(self, data):
        """msr_allgather: every rank's data (the same length everywhere), as
        a list of bytes in rank order."""
        keep, ptr, n = _bytes_in(data, "data")
        size = self.world_size
        out = _c.create_string_buffer(n * size) if n else None
        _check(_L.msr_allgather(self._handle(), ptr, n, out), "msr_allgather")
        del keep
        raw = out.raw if n else b""
        return [raw[i * n : (i + 1) * n] for i in range(size)]

    # -- checkpoints (msr_ckpt_*)
    def ckpt_save(self, dir, step, data, keep=0):  # pylint: disable=redefined-builtin
        """Saves data (bytes-like) as this rank's state of step in dir; every
        rank calls it for the same step. Keeps the keep latest steps (0:
        all)."""
        hold, ptr, n = _bytes_in(data, "data")
        _check(
            _L.msr_ckpt_save(self._handle(), _path(dir), int(step), ptr, n, int(keep)),
            "msr_ckpt_save",
        )
        del hold

    def ckpt_latest(self, dir):  # pylint: disable=redefined-builtin
        """The latest step complete for every rank in dir (-1: none); every
        rank calls it."""
        step = _c.c_int64()
        _check(_L.msr_ckpt_latest(self._handle(), _path(dir), _c.byref(step)), "msr_ckpt_latest")
        return step.value

    def ckpt_load(self, dir, step):  # pylint: disable=redefined-builtin
        """This rank's state of step, as bytes."""
        ptr = _c.c_void_p()
        n = _c.c_size_t()
        _check(
            _L.msr_ckpt_load(self._handle(), _path(dir), int(step), _c.byref(ptr), _c.byref(n)),
            "msr_ckpt_load",
        )
        return _take(ptr, n.value)

    def ckpt_latest_any(self, dir):  # pylint: disable=redefined-builtin
        """(step, world size that saved it) of the newest step any world
        completed in dir; step -1 when there is none. Every rank calls it."""
        step = _c.c_int64()
        world = _c.c_int()
        _check(
            _L.msr_ckpt_latest_any(self._handle(), _path(dir), _c.byref(step), _c.byref(world)),
            "msr_ckpt_latest_any",
        )
        return step.value, world.value

    def ckpt_load_rank(self, dir, step, rank):  # pylint: disable=redefined-builtin
        """The state rank `rank` of the saving world wrote at step, as bytes."""
        ptr = _c.c_void_p()
        n = _c.c_size_t()
        _check(
            _L.msr_ckpt_load_rank(
                self._handle(), _path(dir), int(step), int(rank), _c.byref(ptr), _c.byref(n)
            ),
            "msr_ckpt_load_rank",
        )
        return _take(ptr, n.value)

    # -- reporting (msr_report)
    def report(self, step, step_time=-1.0, **scalars):
        """msr_report: this rank finished training step `step`, which took
        step_time seconds (< 0: the time since the previous report), with
        named values, e.g. ctx.report(12, loss=2.31, tok_s=5120). Never
        waits for the network; the node's msrun batches the reports to the
        coordinator (/metrics, /api/job, stragglers; docs/observe.md)."""
        arr = (_lib.Scalar * len(scalars))()
        names = []
        for i, (name, value) in enumerate(scalars.items()):
            names.append(name.encode())
            arr[i].name = names[-1]
            arr[i].value = float(value)
        _check(
            _L.msr_report(self._handle(), int(step), float(step_time), arr, len(scalars)),
            "msr_report",
        )

    # -- communicators
    def _adopt(self, handle):
        comm = Comm(self, handle)
        self._comms.add(comm)
        return comm

    def comm_world(self):
        """msr_comm_world: a new communicator of every rank (collective)."""
        h = _c.c_void_p()
        _check(_L.msr_comm_world(self._handle(), _c.byref(h)), "msr_comm_world")
        return self._adopt(h)

    @property
    def world(self):
        """The world communicator the shortcuts below use, made on first use
        (so the first of them is collective over the job, as any is)."""
        if self._world is None:
            self._world = self.comm_world()
        return self._world

    def allreduce(self, sendbuf, recvbuf=None, op="sum", dtype=None):
        """world.allreduce: in place when only one buffer is given."""
        return self.world.allreduce(sendbuf, recvbuf, op=op, dtype=dtype)

    def broadcast(self, buf, root=0, dtype=None):
        """world.broadcast."""
        return self.world.broadcast(buf, root=root, dtype=dtype)


@atexit.register
def _finalize_all():
    for ctx in list(_live_contexts):
        try:
            ctx.finalize()
        except Exception:  # pylint: disable=broad-except
            pass


# ---- communicators -----------------------------------------------------


def wait_all(requests):
    """msr_comm_wait_all's rule: waits for every request (None entries
    skipped), then raises the first failure in list order; returns the
    output buffers."""
    results, first = [], None
    for req in requests:
        if req is None:
            results.append(None)
            continue
        try:
            results.append(req.wait())
        except Error as e:
            results.append(None)
            if first is None:
                first = e
    if first is not None:
        raise first
    return results


class _Sender:
    """The result of a receive from any source: the sender, read once the
    receive finished."""

    def __init__(self, src):
        self._src = src

    @property
    def rank(self):
        return self._src.value


class Request:
    """A non-blocking operation in flight (msr_comm_req_t). Holds its
    buffers until wait() or test() finishes it; finish every request (a
    request dropped unfinished is waited for, as msr_comm_wait)."""

    def __init__(self, comm, handle, call, buffers, result):
        self._comm = comm
        self._h = handle
        self._call = call
        self._buffers = buffers
        self._result = result

    def _done(self, st):
        self._h = None
        for b in self._buffers:
            if isinstance(b, Buffer):
                b.release()
        self._buffers = None
        _check(st, self._call)
        if isinstance(self._result, _Sender):
            return self._result.rank
        return self._result

    def wait(self):
        """msr_comm_wait: returns the operation's output buffer, or raises."""
        if self._h is None:
            raise Error(-3, self._call, "the request was already finished")
        h = self._h
        return self._done(_L.msr_comm_wait(h))

    def test(self):
        """msr_comm_test: True when finished (raises if it failed)."""
        if self._h is None:
            return True
        st = _L.msr_comm_test(_c.byref(self._h))
        if st == 1:  # MSR_IN_PROGRESS
            return False
        self._done(st)
        return True

    @property
    def done(self):
        return self._h is None

    def __del__(self):
        try:
            if self._h is not None:
                self.wait()
        except Exception:  # pylint: disable=broad-except
            pass


class Comm:
    """A group of ranks (msr_comm_t): collectives and point-to-point on
    buffers (see the module's docs for what a buffer may be).

    A collective with one buffer runs in place (MSR_IN_PLACE); with two, the
    first is the input and the second the output. The dtype comes from the
    buffer's format (float32, float64, float16, int32, int64, uint8); dtype=
    reinterprets the bytes (dtype='bf16' on a uint16 or int16 array). op:
    'sum', 'prod', 'min', 'max', 'avg'. Each returns its output buffer."""

    def __init__(self, ctx, handle):
        self._ctx = ctx
        self._h = handle

    # -- life
    def _handle(self):
        if not self._h:
            raise Error(-3, "msrun", "the communicator was destroyed")
        return self._h

    def destroy(self):
        """msr_comm_destroy (local). Calling it twice does nothing."""
        h, self._h = self._h, None
        if h:
            _L.msr_comm_destroy(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __del__(self):
        try:
            self.destroy()
        except Exception:  # pylint: disable=broad-except
            pass

    def __repr__(self):
        if not self._h:
            return "<msrun.Comm destroyed>"
        return "<msrun.Comm rank %d of %d (%s)>" % (self.rank, self.size, self.backend)

    @property
    def rank(self):
        return _L.msr_comm_rank(self._handle())

    @property
    def size(self):
        return _L.msr_comm_size(self._handle())

    def world_rank(self, rank):
        """The job rank of member rank (-1 if out of range)."""
        return _L.msr_comm_world_rank(self._handle(), int(rank))

    @property
    def backend(self):
        return _L.msr_comm_backend(self._handle()).decode()

    @property
    def timeout(self):
        """msr_comm_timeout in milliseconds; settable (msr_comm_set_timeout)."""
        return _L.msr_comm_timeout(self._handle())

    @timeout.setter
    def timeout(self, ms):
        _L.msr_comm_set_timeout(self._handle(), int(ms))

    def set_timeout(self, ms):
        _L.msr_comm_set_timeout(self._handle(), int(ms))

    def status(self):
        """msr_comm_status: 0, or the (negative) status that broke it."""
        return _L.msr_comm_status(self._handle())

    def split(self, color, key=0):
        """msr_comm_split (collective): a communicator of the members with
        the same color (>= 0), ranked by key; None for color < 0."""
        h = _c.c_void_p()
        color = int(color)
        if color < 0:
            color = COMM_NO_COLOR
        _check(_L.msr_comm_split(self._handle(), color, int(key), _c.byref(h)), "msr_comm_split")
        return self._ctx._adopt(h) if h.value else None  # pylint: disable=protected-access

    def dup(self, own_worker=False):
        """msr_comm_dup (collective); own_worker: MSR_COMM_OWN_WORKER."""
        h = _c.c_void_p()
        flags = COMM_OWN_WORKER if own_worker else 0
        _check(_L.msr_comm_dup(self._handle(), flags, _c.byref(h)), "msr_comm_dup")
        return self._ctx._adopt(h)  # pylint: disable=protected-access

    # -- argument helpers
    def _pair(self, sendbuf, recvbuf, dtype):
        """(send address, recv Buffer, buffers to hold) for a collective:
        one buffer is in place."""
        if recvbuf is None:
            out = Buffer(sendbuf, "buffer", writable=True, dtype=dtype)
            return _IN_PLACE, out, [out]
        out = Buffer(recvbuf, "recvbuf", writable=True, dtype=dtype)
        src = Buffer(sendbuf, "sendbuf", writable=False, dtype=dtype)
        if src.dtype != out.dtype:
            raise TypeError("msrun: sendbuf and recvbuf differ in dtype")
        return src.address, out, [src, out]

    def _run(self, call, args, buffers, result, req):
        """Calls call(*args) blocking, or with a request when req is set."""
        fn = getattr(_L, call)
        if not req:
            try:
                _check(fn(*args), call)
            finally:
                for b in buffers:
                    if isinstance(b, Buffer):
                        b.release()
            return result
        h = _c.c_void_p()
        st = getattr(_L, "msr_comm_i" + call[len("msr_comm_") :])(*args, _c.byref(h))
        if st != 0:
            for b in buffers:
                if isinstance(b, Buffer):
                    b.release()
            _check(st, "msr_comm_i" + call[len("msr_comm_") :])
        return Request(self, h, call, buffers, result)

    @staticmethod
    def _need(cond, message):
        if not cond:
            raise ValueError("msrun: " + message)

    # -- collectives
    def allreduce(self, sendbuf, recvbuf=None, op="sum", dtype=None, nonblocking=False):
        """recvbuf = op over every rank's sendbuf; in place with one buffer."""
        opv = parse_op(op)
        send, out, hold = self._pair(sendbuf, recvbuf, dtype)
        if send is not _IN_PLACE:
            self._need(hold[0].count == out.count, "allreduce: sendbuf and recvbuf differ in size")
        res = sendbuf if recvbuf is None else recvbuf
        args = (self._handle(), send, out.address, out.count, out.dtype, opv)
        return self._run("msr_comm_allreduce", args, hold, res, nonblocking)

    def iallreduce(self, sendbuf, recvbuf=None, op="sum", dtype=None):
        """Non-blocking allreduce: a Request."""
        return self.allreduce(sendbuf, recvbuf, op=op, dtype=dtype, nonblocking=True)

    def reduce_scatter(self, sendbuf, recvbuf=None, op="sum", dtype=None, nonblocking=False):
        """sendbuf (size blocks) reduced; recvbuf gets block rank. With one
        buffer (in place), the result lands in block rank of it and the other
        blocks are left unspecified."""
        opv = parse_op(op)
        size = self.size
        send, out, hold = self._pair(sendbuf, recvbuf, dtype)
        if send is _IN_PLACE:
            self._need(out.count % size == 0, "reduce_scatter: the buffer is not size blocks")
            n = out.count // size
        else:
            self._need(hold[0].count == out.count * size, "reduce_scatter: sendbuf is not size times recvbuf")
            n = out.count
        res = sendbuf if recvbuf is None else recvbuf
        args = (self._handle(), send, out.address, n, out.dtype, opv)
        return self._run("msr_comm_reduce_scatter", args, hold, res, nonblocking)

    def ireduce_scatter(self, sendbuf, recvbuf=None, op="sum", dtype=None):
        return self.reduce_scatter(sendbuf, recvbuf, op=op, dtype=dtype, nonblocking=True)

    def allgather(self, sendbuf, recvbuf=None, dtype=None, nonblocking=False):
        """recvbuf (size blocks) gets every rank's sendbuf in rank order. With
        one buffer (in place) it is the whole output, this rank's block
        already in place."""
        size = self.size
        send, out, hold = self._pair(sendbuf, recvbuf, dtype)
        if send is _IN_PLACE:
            self._need(out.count % size == 0, "allgather: the buffer is not size blocks")
            n = out.count // size
        else:
            self._need(out.count == hold[0].count * size, "allgather: recvbuf is not size times sendbuf")
            n = hold[0].count
        res = sendbuf if recvbuf is None else recvbuf
        args = (self._handle(), send, out.address, n, out.dtype)
        return self._run("msr_comm_allgather", args, hold, res, nonblocking)

    def iallgather(self, sendbuf, recvbuf=None, dtype=None):
        return self.allgather(sendbuf, recvbuf, dtype=dtype, nonblocking=True)

    def broadcast(self, buf, root=0, dtype=None, nonblocking=False):
        """root's buf to every rank's buf."""
        b = Buffer(buf, "buffer", writable=True, dtype=dtype)
        args = (self._handle(), b.address, b.count, b.dtype, int(root))
        return self._run("msr_comm_broadcast", args, [b], buf, nonblocking)

    def ibroadcast(self, buf, root=0, dtype=None):
        return self.broadcast(buf, root=root, dtype=dtype, nonblocking=True)

    def reduce(self, sendbuf, recvbuf=None, op="sum", root=0, dtype=None, nonblocking=False):
        """op over every rank's sendbuf into root's recvbuf. With one buffer:
        in place on the root; elsewhere it is only the input."""
        opv = parse_op(op)
        root = int(root)
        if recvbuf is None and self.rank != root:
            src = Buffer(sendbuf, "sendbuf", writable=False, dtype=dtype)
            args = (self._handle(), src.address, None, src.count, src.dtype, opv, root)
            return self._run("msr_comm_reduce", args, [src], sendbuf, nonblocking)
        send, out, hold = self._pair(sendbuf, recvbuf, dtype)
        if send is not _IN_PLACE:
            self._need(hold[0].count == out.count, "reduce: sendbuf and recvbuf differ in size")
        res = sendbuf if recvbuf is None else recvbuf
        args = (self._handle(), send, out.address, out.count, out.dtype, opv, root)
        return self._run("msr_comm_reduce", args, hold, res, nonblocking)

    def ireduce(self, sendbuf, recvbuf=None, op="sum", root=0, dtype=None):
        return self.reduce(sendbuf, recvbuf, op=op, root=root, dtype=dtype, nonblocking=True)

    def alltoall(self, sendbuf, recvbuf=None, dtype=None, nonblocking=False):
        """Block j of sendbuf goes to rank j, which keeps it as block rank;
        both hold size blocks. In place with one buffer."""
        size = self.size
        send, out, hold = self._pair(sendbuf, recvbuf, dtype)
        self._need(out.count % size == 0, "alltoall: the buffer is not size blocks")
        if send is not _IN_PLACE:
            self._need(hold[0].count == out.count, "alltoall: sendbuf and recvbuf differ in size")
        res = sendbuf if recvbuf is None else recvbuf
        args = (self._handle(), send, out.address, out.count // size, out.dtype)
        return self._run("msr_comm_alltoall", args, hold, res, nonblocking)

    def ialltoall(self, sendbuf, recvbuf=None, dtype=None):
        return self.alltoall(sendbuf, recvbuf, dtype=dtype, nonblocking=True)

    def alltoallv(self, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype=None,
                  nonblocking=False):
        """As alltoall with per-rank counts and displacements (in elements).
        Not in place."""
        size = self.size
        for name, v in (("sendcounts", sendcounts), ("sdispls", sdispls),
                        ("recvcounts", recvcounts), ("rdispls", rdispls)):
            self._need(len(v) == size, "alltoallv: %s has %d entries, not %d" % (name, len(v), size))
        out = Buffer(recvbuf, "recvbuf", writable=True, dtype=dtype)
        src = Buffer(sendbuf, "sendbuf", writable=False, dtype=dtype)
        if src.dtype != out.dtype:
            raise TypeError("msrun: sendbuf and recvbuf differ in dtype")
        sc, sd = counts_array(sendcounts, "sendcounts"), counts_array(sdispls, "sdispls")
        rc, rd = counts_array(recvcounts, "recvcounts"), counts_array(rdispls, "rdispls")
        for i in range(size):
            self._need(sd[i] + sc[i] <= src.count, "alltoallv: block %d runs past sendbuf" % i)
            self._need(rd[i] + rc[i] <= out.count, "alltoallv: block %d runs past recvbuf" % i)
        args = (self._handle(), src.address, sc, sd, out.address, rc, rd, out.dtype)
        # a request holds the count arrays too: libmsrun reads them until it ends
        return self._run("msr_comm_alltoallv", args, [src, out, sc, sd, rc, rd], recvbuf, nonblocking)

    def ialltoallv(self, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype=None):
        return self.alltoallv(sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls,
                              dtype=dtype, nonblocking=True)

    def barrier(self, nonblocking=False):
        """Returns once every member entered it."""
        return self._run("msr_comm_barrier", (self._handle(),), [], None, nonblocking)

    def ibarrier(self):
        return self.barrier(nonblocking=True)

    # -- point to point
    def send(self, buf, peer, tag=0, dtype=None, nonblocking=False):
        """Sends buf to member peer with tag (0 .. 2**24-1)."""
        b = Buffer(buf, "buffer", writable=False, dtype=dtype)
        args = (self._handle(), b.address, b.count, b.dtype, int(peer), int(tag))
        return self._run("msr_comm_send", args, [b], buf, nonblocking)

    def isend(self, buf, peer, tag=0, dtype=None):
        return self.send(buf, peer, tag=tag, dtype=dtype, nonblocking=True)

    def recv(self, buf, peer, tag=0, dtype=None, nonblocking=False):
        """Receives exactly buf's size from member peer with tag into buf."""
        b = Buffer(buf, "buffer", writable=True, dtype=dtype)
        args = (self._handle(), b.address, b.count, b.dtype, int(peer), int(tag))
        return self._run("msr_comm_recv", args, [b], buf, nonblocking)

    def irecv(self, buf, peer, tag=0, dtype=None):
        return self.recv(buf, peer, tag=tag, dtype=dtype, nonblocking=True)

    def recv_any(self, buf, tag=0, dtype=None, nonblocking=False):
        """msr_comm_recv_any: receives the next message with tag from any
        member (this one too) into buf, exactly buf's size, and returns the
        sender's rank in this communicator (mpi4py's recv with
        source=ANY_SOURCE and a status's source). nonblocking: a Request
        whose wait() returns the sender."""
        b = Buffer(buf, "buffer", writable=True, dtype=dtype)
        src = _c.c_int(-1)
        args = (self._handle(), b.address, b.count, b.dtype, int(tag), _c.byref(src))
        res = self._run("msr_comm_recv_any", args, [b, src], _Sender(src), nonblocking)
        return res.rank if isinstance(res, _Sender) else res

    def irecv_any(self, buf, tag=0, dtype=None):
        return self.recv_any(buf, tag=tag, dtype=dtype, nonblocking=True)
