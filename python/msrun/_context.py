"""The context (msr_ctx_t): who and where a worker is, the store,
checkpoints, reports, and the communicators made from it."""

import atexit
import ctypes as _c
import threading
import weakref

from . import _lib
from ._args import _NOT_FOUND, _bytes_in, _gather_list, _key, _path, _take
from ._comm import Comm
from ._errors import Error
from ._errors import check as _check

_L = _lib.lib


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

