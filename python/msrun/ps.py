"""The parameter server from Python: ctypes over msrun/ps.h (docs/ps.md).

    import msrun, msrun.ps
    ctx = msrun.init()
    world = ctx.comm_world()
    ps = msrun.ps.ParameterServer(world, servers=0, staleness=msrun.ps.SYNC)
    emb = ps.table_create(rows=1000, width=8, optim="adam", lr=0.01, init_scale=0.1)
    if ps.role == "server":
        ps.serve()
    else:
        ps.pull(emb, keys, rows)        # keys int64 (n,), rows float32 (n, 8)
        ps.push(emb, keys, grads)
    ps.destroy()

In a job of msrun --ps_servers, msrun.ps.join(ctx, ...) makes the same
over every rank and also serves a worker that msrun started again alone
after it died (asynchronous mode: it joins the running servers).

Methods are named after the C calls (msr_ps_pull is ps.pull); buffers are
what the rest of the package takes (NumPy arrays, array.array, bytearray,
memoryview, CPU tensors): keys of int64, rows of float32. A failed call
raises msrun.Error (or a subclass) with msr_last_error()'s sentence.
"""

import ctypes as _c
import os

from . import _lib
from ._buffers import Buffer
from ._errors import Error
from ._errors import check as _check

__all__ = ["ParameterServer", "join", "role", "init_value", "SYNC", "STALENESS_ENV", "OPTIMIZERS"]

SYNC = -1
STALENESS_ENV = -2  # msrun --ps_staleness's (MSR_PS_STALENESS)
OPTIMIZERS = {"sgd": 0, "adagrad": 1, "adam": 2}
_ROLES = {0: "worker", 1: "server"}


class TableConfig(_c.Structure):
    """msr_ps_table_config_t."""

    _fields_ = [
        ("rows", _c.c_uint64),
        ("width", _c.c_uint32),
        ("optim", _c.c_int),
        ("lr", _c.c_float),
        ("beta1", _c.c_float),
        ("beta2", _c.c_float),
        ("eps", _c.c_float),
        ("init_scale", _c.c_float),
        ("seed", _c.c_uint64),
    ]


_L = _lib.lib
_P = _c.POINTER
_status = _c.c_int
for _name, _res, _args in [
    ("msr_ps_role", _status, [_c.c_void_p, _P(_c.c_int), _P(_c.c_int), _P(_c.c_int)]),
    ("msr_ps_create", _status, [_c.c_void_p, _c.c_int, _c.c_int, _P(_c.c_void_p)]),
    ("msr_ps_join", _status, [_c.c_void_p, _c.c_int, _c.c_int, _P(_c.c_void_p)]),
    ("msr_ps_destroy", None, [_c.c_void_p]),
    ("msr_ps_my_role", _c.c_int, [_c.c_void_p]),
    ("msr_ps_role_rank", _c.c_int, [_c.c_void_p]),
    ("msr_ps_workers", _c.c_int, [_c.c_void_p]),
    ("msr_ps_servers", _c.c_int, [_c.c_void_p]),
    ("msr_ps_table_create", _status, [_c.c_void_p, _P(TableConfig), _P(_c.c_int)]),
    ("msr_ps_pull", _status,
     [_c.c_void_p, _c.c_int, _c.c_void_p, _c.c_uint64, _c.c_void_p, _c.c_uint32]),
    ("msr_ps_push", _status,
     [_c.c_void_p, _c.c_int, _c.c_void_p, _c.c_uint64, _c.c_void_p, _c.c_uint32]),
    ("msr_ps_pull_dense", _status, [_c.c_void_p, _c.c_int, _c.c_void_p]),
    ("msr_ps_push_dense", _status, [_c.c_void_p, _c.c_int, _c.c_void_p]),
    ("msr_ps_serve", _status, [_c.c_void_p]),
    ("msr_ps_durable", _status, [_c.c_void_p, _c.c_char_p, _c.c_uint64, _P(_c.c_uint64)]),
    ("msr_ps_durable_fsync", _status, [_c.c_void_p, _c.c_uint64]),
    ("msr_ps_traffic", None, [_c.c_void_p, _P(_c.c_uint64), _P(_c.c_uint64)]),
    ("msr_ps_init_value", _c.c_float, [_c.c_uint64, _c.c_uint64, _c.c_uint32, _c.c_float]),
]:
    _fn = getattr(_L, _name)
    _fn.restype = _res
    _fn.argtypes = _args
del _name, _res, _args, _fn


def role(ctx):
    """msr_ps_role: ("server" or "worker", rank in the role, the role's size)."""
    r, rr, rs = _c.c_int(), _c.c_int(), _c.c_int()
    _check(
        _L.msr_ps_role(ctx._handle(), _c.byref(r), _c.byref(rr), _c.byref(rs)),  # pylint: disable=protected-access
        "msr_ps_role",
    )
    return _ROLES[r.value], rr.value, rs.value


def join(ctx, servers=0, staleness=STALENESS_ENV):
    """msr_ps_join: the job's parameter server over every rank of ctx (a
    msrun.Context), for a job of msrun --ps_servers; arguments as
    ParameterServer's. A first process of its rank makes it over the world
    (collective). A worker of an asynchronous parameter server that msrun
    started again alone (MSR_INCARNATION > 0) joins the running servers
    instead: its pulls get the current rows. Servers made so take such a
    replacement in serve(). Raises as ParameterServer, plus the refusal of
    a replaced server or synchronous worker, and msrun.TimeoutError (a
    server did not pair within ctx's timeout)."""
    h = _c.c_void_p()
    _check(_L.msr_ps_join(ctx._handle(), int(servers), int(staleness), _c.byref(h)),  # pylint: disable=protected-access
           "msr_ps_join")
    ps = ParameterServer.__new__(ParameterServer)
    ps._adopt(h, ctx)  # pylint: disable=protected-access
    return ps


def init_value(seed, row, col, init_scale):
    """msr_ps_init_value: a table's initial element."""
    return _L.msr_ps_init_value(int(seed), int(row), int(col), float(init_scale))


class ParameterServer:
    """msr_ps_t over a communicator (msrun.Comm): its last `servers` members
    serve (0: MSR_PS_SERVERS). staleness: SYNC, K >= 0, or STALENESS_ENV. Collective."""

    def __init__(self, comm, servers=0, staleness=SYNC):
        h = _c.c_void_p()
        _check(
            _L.msr_ps_create(comm._handle(), int(servers), int(staleness), _c.byref(h)),  # pylint: disable=protected-access
            "msr_ps_create",
        )
        self._adopt(h, comm)

    def _adopt(self, h, owner):
        self._h = h
        self._owner = owner  # what h was made from, kept alive while h is
        self._tables = []  # (rows, width) of each table, for the buffers' checks

    def _handle(self):
        if not self._h:
            raise Error(-3, "msrun", "the parameter server was destroyed")
        return self._h

    def destroy(self):
        """msr_ps_destroy: a worker's goodbye to the servers. Twice: nothing."""
        h, self._h = self._h, None
        if h:
            _L.msr_ps_destroy(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    @property
    def role(self):
        return _ROLES[_L.msr_ps_my_role(self._handle())]

    @property
    def role_rank(self):
        return _L.msr_ps_role_rank(self._handle())

    @property
    def workers(self):
        return _L.msr_ps_workers(self._handle())

    @property
    def servers(self):
        return _L.msr_ps_servers(self._handle())

    def table_create(self, rows, width, optim="sgd", lr=0.01, beta1=0.0, beta2=0.0, eps=0.0,
                     init_scale=0.0, seed=0):
        """msr_ps_table_create: the next table's id. Every member, same order."""
        if optim not in OPTIMIZERS:
            raise ValueError("msrun.ps: optim %r is not one of %s" % (optim, sorted(OPTIMIZERS)))
        cfg = TableConfig(int(rows), int(width), OPTIMIZERS[optim], float(lr), float(beta1),
                          float(beta2), float(eps), float(init_scale), int(seed))
        t = _c.c_int()
        _check(_L.msr_ps_table_create(self._handle(), _c.byref(cfg), _c.byref(t)),
               "msr_ps_table_create")
        self._tables.append((int(rows), int(width)))
        return t.value

    def _width(self, table, width):
        """The width to send: the caller's, else the table's (the server
        checks it either way)."""
        if width is not None:
            return int(width)
        if 0 <= table < len(self._tables):
            return self._tables[table][1]
        return 1

    @staticmethod
    def _fits(buf, need, what):
        # the C call reads or writes need floats: a smaller buffer would
        # be overrun
        if buf.count < need:
            raise ValueError("msrun.ps: %s holds %d floats, the call needs %d"
                             % (what, buf.count, need))

    def _dense(self, table):
        if not 0 <= table < len(self._tables):
            raise ValueError("msrun.ps: unknown table %d" % table)
        rows, width = self._tables[table]
        return rows * width

    def _rows(self, call, name, table, keys, rows, what, writable, width):
        """call (msr_ps_pull or msr_ps_push, named name) on the keys' rows:
        rows (float32, len(keys) x width, called what) checked to hold
        them first."""
        k = Buffer(keys, "keys", writable=False, dtype="i64")
        r = Buffer(rows, what, writable=writable, dtype="f32")
        w = self._width(table, width)
        self._fits(r, k.count * w, what)
        _check(call(self._handle(), int(table), k.address, k.count, r.address, w), name)

    def pull(self, table, keys, rows, width=None):
        """msr_ps_pull: rows (float32, len(keys) x width) gets the keys' rows."""
        self._rows(_L.msr_ps_pull, "msr_ps_pull", table, keys, rows, "rows", True, width)
        return rows

    def push(self, table, keys, grads, width=None):
        """msr_ps_push: the gradients (float32, len(keys) x width) of the keys' rows."""
        self._rows(_L.msr_ps_push, "msr_ps_push", table, keys, grads, "grads", False, width)

    def pull_dense(self, table, values):
        """msr_ps_pull_dense: values (float32, rows x width) gets the whole table."""
        v = Buffer(values, "values", writable=True, dtype="f32")
        self._fits(v, self._dense(int(table)), "values")
        _check(_L.msr_ps_pull_dense(self._handle(), int(table), v.address), "msr_ps_pull_dense")
        return values

    def push_dense(self, table, grads):
        """msr_ps_push_dense: the whole table's gradients."""
        g = Buffer(grads, "grads", writable=False, dtype="f32")
        self._fits(g, self._dense(int(table)), "grads")
        _check(_L.msr_ps_push_dense(self._handle(), int(table), g.address), "msr_ps_push_dense")

    def durable(self, dir, ckpt_every=0, fsync=0):  # pylint: disable=redefined-builtin
        """msr_ps_durable (servers, before serve), then, when fsync > 0,
        msr_ps_durable_fsync (the log synced every fsync records): the
        number of updates restored from dir's checkpoint and log (0 after
        a reshard: dir written by other numbers of servers or workers,
        docs/ps.md)."""
        n = _c.c_uint64()
        _check(_L.msr_ps_durable(self._handle(), os.fsencode(dir), int(ckpt_every),
                                 _c.byref(n)), "msr_ps_durable")
        if fsync:
            _check(_L.msr_ps_durable_fsync(self._handle(), int(fsync)), "msr_ps_durable_fsync")
        return n.value

    @property
    def traffic(self):
        """msr_ps_traffic: (bytes sent, bytes received) so far."""
        sent, received = _c.c_uint64(), _c.c_uint64()
        _L.msr_ps_traffic(self._handle(), _c.byref(sent), _c.byref(received))
        return sent.value, received.value

    def serve(self):
        """msr_ps_serve: answers the workers until all are done (servers)."""
        _check(_L.msr_ps_serve(self._handle()), "msr_ps_serve")
