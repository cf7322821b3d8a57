"""torch.distributed over libmsrun (docs/python.md, "PyTorch").

    import msrun.torch                  # registers the backend "msrun"
    dist.init_process_group("msrun")    # under msrun: its communicators and store

Importing this module:
- registers the backend "msrun" (torch.distributed.Backend.register_backend):
  a process group over libmsrun's host communicators (the C++ module
  _msrun_c10d, built beside libmsrun when libtorch was found);
- registers the rendezvous "msrun://": init_process_group(backend,
  init_method="msrun://") gives any backend (Gloo too) msrun's store, and the
  rank and size of the job msrun started;
- makes "msrun://" the default init_method of init_process_group("msrun"),
  so that the job opens no TCPStore of torch's (env:// would);
- lets new_group(..., backend="msrun") make its communicator by splitting
  the world's, which every rank of the job takes part in (torch calls
  new_group on every rank; its non-members join the split with no color);
- sets MSR_COMM_BESIDE_COMPUTE=1 unless it is set: past 1 ms the
  communicators' waits yield the core to the training thread, not poll.

The libmsrun context is msrun.init()'s, made on first use and kept for the
life of the process: context() returns it.
"""

import atexit
import glob
import importlib.util
import os
import threading
from datetime import timedelta

import torch.distributed as dist
from torch.distributed import distributed_c10d as _c10d

import msrun

__all__ = ["BACKEND", "context", "store", "world_group"]

BACKEND = "msrun"

_lock = threading.RLock()
_ctx = None
_world = None  # the world process group (the default one, or one made for a split)
_world_timeout_ms = None


def _load_module():
    """_msrun_c10d from beside the libmsrun the package loaded."""
    libdir = os.path.dirname(os.path.abspath(msrun.library_path()))
    found = sorted(glob.glob(os.path.join(libdir, "_msrun_c10d*.so")))
    if not found:
        raise ImportError(
            "msrun.torch: no _msrun_c10d module beside %s (msrun was built without "
            "libtorch: Debian's libtorch-dev and pybind11-dev, then rebuild)" % msrun.library_path()
        )
    spec = importlib.util.spec_from_file_location("msrun._msrun_c10d", found[0])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_C = _load_module()

# The group's collectives run on its worker thread while the training thread
# computes (DDP's buckets are reduced during the backward): with a core per
# rank, libmsrun's waits poll for 20 ms by default and take that core from
# the backward. Told so, they poll 1 ms and then yield it (docs/comm.md,
# "Progress and waiting"); a value the user set stays. Set before any
# communicator of this process exists: libmsrun reads it as each starts.
os.environ.setdefault("MSR_COMM_BESIDE_COMPUTE", "1")


def context():
    """The libmsrun context of this process (msrun.init(), made once)."""
    global _ctx
    with _lock:
        if _ctx is None:
            _ctx = msrun.init()
        return _ctx


def _ctx_address():
    return context()._handle().value  # pylint: disable=protected-access


def store():
    """A torch.distributed Store over msrun's store."""
    return _C.Store(_ctx_address())


def _ms(timeout):
    if timeout is None:
        return -1
    if isinstance(timeout, timedelta):
        return int(timeout.total_seconds() * 1000)
    return int(timeout * 1000)


def world_group(timeout=None):
    """The world process group over msrun (collective over the job the first
    time: every rank must ask)."""
    global _world, _world_timeout_ms
    with _lock:
        if _world is None:
            ms = _ms(timeout if timeout is not None else _c10d.default_pg_timeout)
            _world = _C.ProcessGroupMsrun.world(_ctx_address(), ms)
            _world_timeout_ms = ms
        return _world


def _create(opts, pg_options=None):
    """The backend's creator (extended API): the default group is msrun's
    world; a sub-group is a split of it (its non-members join the split in
    _new_group_helper)."""
    if pg_options is not None:
        raise RuntimeError("msrun backend: pg_options are not supported")
    ctx = context()
    timeout = opts.timeout
    if not opts.global_ranks_in_group:
        if opts.group_size != ctx.world_size or opts.group_rank != ctx.rank:
            raise RuntimeError(
                "msrun backend: the default group must be the job msrun started: rank %d of %d "
                "asked, the job has rank %d of %d (use init_method='msrun://')"
                % (opts.group_rank, opts.group_size, ctx.rank, ctx.world_size)
            )
        return world_group(timeout)
    return world_group(timeout).split(0, opts.group_rank, _ms(timeout))


def _rendezvous(url, **kwargs):  # pylint: disable=unused-argument
    """init_method="msrun://": msrun's store, rank and size."""
    ctx = context()
    yield (store(), ctx.rank, ctx.world_size)
    raise RuntimeError("msrun:// rendezvous cannot be used twice (the job is not elastic here)")


_torch_helper = _c10d._new_process_group_helper  # pylint: disable=protected-access
_torch_init = _c10d.init_process_group


def _new_group_helper(group_size, group_rank, global_ranks_in_group, backend, *args, **kwargs):
    """torch's _new_process_group_helper, plus: a rank outside a new msrun
    sub-group joins the world's split with no color (the split is collective
    over the world)."""
    if global_ranks_in_group and dist.Backend(backend) == BACKEND:
        me = _c10d._get_default_group().rank()  # pylint: disable=protected-access
        if me not in global_ranks_in_group:
            timeout = kwargs.get("timeout", _c10d.default_pg_timeout)
            world_group(timeout).split(-1, 0, _ms(timeout))
    return _torch_helper(group_size, group_rank, global_ranks_in_group, backend, *args, **kwargs)


def _init_process_group(backend, init_method=None, *args, **kwargs):
    """torch's init_process_group with msrun:// the default init_method of
    the msrun backend."""
    if (
        init_method is None
        and kwargs.get("store") is None
        and not args
        and dist.Backend(backend) == BACKEND
    ):
        init_method = "msrun://"
    return _torch_init(backend, init_method, *args, **kwargs)


def _shutdown():
    """At exit, before msrun's own handler finalizes the context: the groups'
    communicators go first."""
    global _world
    _C.shutdown_all()
    _world = None


with _lock:
    if BACKEND.upper() not in dist.Backend._plugins:  # pylint: disable=protected-access
        dist.Backend.register_backend(BACKEND, _create, extended_api=True)
        dist.register_rendezvous_handler("msrun", _rendezvous)
        _c10d._new_process_group_helper = _new_group_helper  # pylint: disable=protected-access
        _c10d.init_process_group = _init_process_group
        dist.init_process_group = _init_process_group
        atexit.register(_shutdown)
