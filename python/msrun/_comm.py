"""The communicator (msr_comm_t): its collectives and point-to-point calls,
and the checks of their buffer arguments."""

import ctypes as _c
import operator as _operator

from . import _lib
from ._args import _IN_PLACE
from ._buffers import Buffer, counts_array, parse_op
from ._errors import Error
from ._errors import check as _check
from ._request import Request, _Sender

_L = _lib.lib

# MSR_COMM_OWN_WORKER of comm.h
COMM_OWN_WORKER = 1
# MSR_COMM_NO_COLOR
COMM_NO_COLOR = -1


class Comm:
    """A group of ranks (msr_comm_t): collectives and point-to-point on
    buffers (docs/python.md and _buffers.py say what a buffer may be).

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

    def pairs(self, peers):
        """msr_comm_pairs (collective): a Comm of two with each member peers
        names (ranks in this communicator), each on a UCX worker of its own,
        in the order given; pair k is ranked by rank here (the lower one 0).
        Every member calls it ([] for none), and j lists i exactly when i
        lists j. A bad list on any member raises on every member alike
        (InvalidArgumentError; here TypeError for a peer that is not an
        integer, ValueError for one past a C int), one member out of memory
        or refused by UCX raises on every member at once, naming it; nothing
        is made."""
        h = self._handle()
        try:
            ranks = [_operator.index(p) for p in peers]
            bad = None
        except TypeError:
            ranks, bad = [], TypeError("msrun: pairs: peers must be a sequence of integer ranks")
        if any(r < -(2**31) or r >= 2**31 for r in ranks):
            ranks, bad = [], ValueError("msrun: pairs: a peer is out of range: %r" % (peers,))
        if bad is not None:
            # still called, with a count C refuses, so that every member
            # fails alike instead of waiting for this one
            _L.msr_comm_pairs(h, -1, None, None)
            raise bad
        n = len(ranks)
        arr = (_c.c_int * (n if n else 1))(*ranks)
        out = (_c.c_void_p * (n if n else 1))()
        _check(_L.msr_comm_pairs(h, n, arr, out), "msr_comm_pairs")
        return [self._ctx._adopt(_c.c_void_p(out[k])) for k in range(n)]  # pylint: disable=protected-access

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
