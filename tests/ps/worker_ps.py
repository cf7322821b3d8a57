"""The parameter server from Python (msrun.ps) under the real msrun with
--ps_servers 1 (tests/ps/run_py.sh): roles, a synchronous SGD step checked
against its arithmetic, dense tensors, a refused request as an exception.
Each rank prints "rank R: ps ok" when its checks passed."""
import array
import os
import shutil
import sys
import tempfile

import msrun
import msrun.ps


def fail(msg):
    print("FAIL: %s" % msg, flush=True)
    sys.exit(1)


def main():
    ctx = msrun.init()
    role, role_rank, role_size = msrun.ps.role(ctx)
    want = "server" if ctx.rank == ctx.world_size - 1 else "worker"
    if role != want:
        fail("rank %d is a %s, want %s" % (ctx.rank, role, want))
    world = ctx.comm_world()
    ps = msrun.ps.ParameterServer(world, servers=0, staleness=msrun.ps.SYNC)
    if (ps.role, ps.role_rank, ps.workers, ps.servers) != (role, role_rank,
                                                           ctx.world_size - 1, 1):
        fail("ps says %s %d of %d workers, %d servers" % (ps.role, ps.role_rank, ps.workers,
                                                          ps.servers))
    emb = ps.table_create(rows=10, width=2, optim="sgd", lr=0.5, init_scale=1.0, seed=3)
    dense = ps.table_create(rows=1, width=3, optim="sgd", lr=1.0)
    if ps.role == "server":
        shards = tempfile.mkdtemp()
        try:
            if ps.durable(shards, fsync=1) != 0:
                fail("a new directory restored updates")
            try:
                ps.durable(shards)
                fail("msr_ps_durable twice was accepted")
            except msrun.Error as e:
                if "once" not in str(e):
                    fail("msr_ps_durable's refusal says %s" % e)
            ps.serve()
            # the two synchronous steps of the tables were logged
            if os.path.getsize(os.path.join(shards, "ps-s0.log")) <= 8:
                fail("the synchronous steps were not logged")
        finally:
            shutil.rmtree(shards)
    else:
        keys = array.array("q", [9, 0])
        rows = array.array("f", [0.0] * 4)
        ps.pull(emb, keys, rows)
        for i, k in enumerate(keys):
            for c in range(2):
                want_v = msrun.ps.init_value(3, k, c, 1.0)
                if rows[i * 2 + c] != want_v:
                    fail("row %d col %d is %r, want %r" % (k, c, rows[i * 2 + c], want_v))
        before = array.array("f", rows)
        # every worker pushes 1.0 for row 9: the mean is 1, the step 0.5
        ps.push(emb, array.array("q", [9]), array.array("f", [1.0, 1.0]))
        ps.push_dense(dense, array.array("f", [1.0, 2.0, 3.0]))
        ps.pull(emb, keys, rows)
        if abs(rows[0] - (before[0] - 0.5)) > 1e-6 or rows[2] != before[2]:
            fail("after the step rows are %s, were %s" % (list(rows), list(before)))
        d = array.array("f", [0.0] * 3)
        ps.pull_dense(dense, d)
        if list(d) != [-1.0, -2.0, -3.0]:
            fail("the dense tensor is %s" % list(d))
        sent, received = ps.traffic
        if sent <= 0 or received <= 0:
            fail("traffic %d sent, %d received" % (sent, received))
        try:
            ps.pull(emb, array.array("q", [10]), array.array("f", [0.0] * 2))
            fail("key 10 of 10 rows was not refused")
        except msrun.InvalidArgumentError as e:
            if "out of range" not in str(e):
                fail("the refusal says %s" % e)
        try:
            ps.pull(emb, keys, array.array("f", [0.0] * 3))
            fail("a buffer of 3 floats for 2 rows of 2 was taken")
        except ValueError:
            pass
    ps.destroy()
    world.destroy()
    print("rank %d: ps ok" % ctx.rank, flush=True)
    ctx.finalize()


main()
