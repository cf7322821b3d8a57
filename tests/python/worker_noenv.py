"""A worker that imports msrun with nothing set by the user (run_noenv.sh):
msrun must have put its package on PYTHONPATH and named its libmsrun. Prints
what it loaded, where from, and an allreduce's result."""

import os

import numpy as np

import msrun

ctx = msrun.init()
a = np.full(4, ctx.rank + 1, dtype=np.float32)
ctx.allreduce(a)
want = ctx.world_size * (ctx.world_size + 1) / 2
print("rank %d of %d: sum %s lib %s package %s PYTHONPATH %s" % (
    ctx.rank, ctx.world_size, "ok" if (a == want).all() else a.tolist(),
    os.path.realpath(msrun.library_path()),
    os.path.realpath(os.path.dirname(os.path.dirname(msrun.__file__))),
    os.environ.get("PYTHONPATH")))
if os.environ.get("NOENV_USER_MODULE"):
    import usermod  # pylint: disable=import-error,unused-import
    print("rank %d: the user's PYTHONPATH kept" % ctx.rank)
ctx.finalize()
