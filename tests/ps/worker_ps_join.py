"""A worker killed and replaced alone, from Python (msrun.ps.join), under
the real msrun with 2 workers, a server, --ps_staleness=1 (K) and
--max_restarts=1 (tests/ps/run_py_join.sh): tests/ps/ps_replace.c, smaller.
Worker 1 pushes P0 steps and kills itself with SIGKILL; worker 0 pushes N
steps more while it is dead (past its clock + K: the server took it as
lost); the replacement (MSR_INCARNATION=1, started by msrun alone) joins
with msrun.ps.join, pulls the current rows and pushes R steps, worker 0 M
more; every row counts exactly the acknowledged pushes (each push moves
each row it names by -1). Every rank prints "rank R: ps join ok" (the
replacement "rank 1: incarnation 1 ps join ok") when its checks passed.
The store keys say the states waited for."""
import array
import os
import signal
import sys

import msrun
import msrun.ps

K, P0, N, M, R = 1, 3, 5, 2, 4
SHARED, VICTIM = 2, 1


def fail(msg):
    print("FAIL: %s" % msg, flush=True)
    sys.exit(1)


def step(ps, t, w):
    keys = array.array("q", [w, SHARED])
    rows = array.array("f", [0.0, 0.0])
    ps.pull(t, keys, rows)
    ps.push(t, keys, array.array("f", [1.0, 1.0]))


def rows_of(ps, t, keys):
    rows = array.array("f", [0.0] * len(keys))
    ps.pull(t, array.array("q", keys), rows)
    return list(rows)


def check_rows(ps, t):
    want = [-(P0 + N + M), -(P0 + R), -(2 * P0 + N + M + R)]
    got = rows_of(ps, t, [0, VICTIM, SHARED])
    if got != [float(v) for v in want]:
        fail("rows 0, %d and %d are %s, want %s" % (VICTIM, SHARED, got, want))


def refusals(ctx):
    """msr_ps_join's refusal of an MSR_INCARNATION that is not a count,
    before anything is made, as the exception of its status."""
    inc = os.environ["MSR_INCARNATION"]
    os.environ["MSR_INCARNATION"] = "1x"
    try:
        msrun.ps.join(ctx)
        fail("MSR_INCARNATION=1x was taken")
    except msrun.InvalidArgumentError as e:
        if "not a count" not in str(e):
            fail("the refusal says %s" % e)
    finally:
        os.environ["MSR_INCARNATION"] = inc


def main():
    ctx = msrun.init()
    inc = int(os.environ.get("MSR_INCARNATION", "-1"))
    if inc < 0:
        fail("no MSR_INCARNATION")
    me = ctx.rank
    if me == VICTIM:
        refusals(ctx)
    if me == VICTIM and inc > 0:
        ctx.store_get("join/advanced")  # worker 0 went on while it was dead
    ps = msrun.ps.join(ctx)
    if (ps.workers, ps.servers) != (2, 1):
        fail("needs 2 workers and a server, has %d and %d" % (ps.workers, ps.servers))
    t = ps.table_create(rows=3, width=1, optim="sgd", lr=2.0)
    if ps.role == "server":
        ps.serve()
    elif me == VICTIM and inc == 0:
        for _ in range(P0):
            step(ps, t, me)
        ctx.store_set("join/dead", "1")
        print("worker %d: %d steps, killing itself" % (me, P0), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    elif me == VICTIM:
        got = rows_of(ps, t, [VICTIM, SHARED])
        if got != [float(-P0), float(-(2 * P0 + N))]:
            fail("the replacement pulled %s, want %s" % (got, [-P0, -(2 * P0 + N)]))
        print("worker %d: incarnation %d joined, pulled the current rows" % (me, inc), flush=True)
        ctx.store_set("join/joined", "1")
        for _ in range(R):
            step(ps, t, me)
        if ctx.store_add("join/done") == 2:
            ctx.store_set("join/all", "1")
        ctx.store_get("join/all")
        check_rows(ps, t)
    else:
        for i in range(P0 + N + M):
            if i == P0:
                ctx.store_get("join/dead")
            if i == P0 + N:
                ctx.store_set("join/advanced", "1")
                ctx.store_get("join/joined")
            step(ps, t, me)
        if ctx.store_add("join/done") == 2:
            ctx.store_set("join/all", "1")
        ctx.store_get("join/all")
        check_rows(ps, t)
    ps.destroy()
    print("rank %d:%s ps join ok" % (me, " incarnation %d" % inc if inc else ""), flush=True)
    ctx.finalize()


main()
