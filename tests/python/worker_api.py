"""The Python package (python/msrun) under the real msrun: rank and size, the
store across ranks (and its wait for a change), checkpoints, every
collective on NumPy arrays and bytearray against the expected values,
receives from any source, and errors as exceptions. Each rank
prints "rank R of N: api ok" when every check passed; the first failed
check ends the rank with its message (run.sh starts it and checks that)."""

import os
import sys
import time

try:
    import numpy as np
except ImportError as e:
    print("SKIP: numpy cannot be imported (Debian: python3-numpy): %s" % e)
    sys.exit(77)

import msrun


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def expect_raises(exc, fn, what, contains=None):
    try:
        fn()
    except exc as e:
        if contains is not None:
            expect(contains in str(e), "%s: %r not in %r" % (what, contains, str(e)))
        return e
    raise AssertionError("%s: no %s raised" % (what, exc.__name__))


def check_context(ctx):
    n = int(os.environ["MSR_WORLD_SIZE"])
    expect(ctx.world_size == n, "world_size %d, MSR_WORLD_SIZE %d" % (ctx.world_size, n))
    expect(ctx.rank == int(os.environ["MSR_RANK"]), "rank %d vs MSR_RANK" % ctx.rank)
    expect(ctx.local_rank == int(os.environ["MSR_LOCAL_RANK"]), "local rank %d" % ctx.local_rank)
    expect(ctx.local_world_size == int(os.environ["MSR_LOCAL_WORLD_SIZE"]), "local world size")
    expect(ctx.node_rank == int(os.environ["MSR_NODE_RANK"]), "node rank %d" % ctx.node_rank)
    expect(ctx.node_count == int(os.environ["MSR_NODE_COUNT"]), "node count %d" % ctx.node_count)
    expect(ctx.generation == 0, "generation %d" % ctx.generation)
    expect(ctx.job_id == os.environ["MSR_JOB_ID"], "job_id %r" % ctx.job_id)
    old = ctx.timeout
    ctx.timeout = 12345
    expect(ctx.timeout == 12345, "timeout after set: %d" % ctx.timeout)
    ctx.set_timeout(old)
    expect(ctx.timeout == old, "timeout restored")
    ctx.heartbeat()
    expect(msrun.version() == "0.1.0" or msrun.version().count(".") == 2, "version")
    # every rank agrees on who is who
    ranks = ctx.allgather(ctx.rank.to_bytes(4, "little"))
    expect([int.from_bytes(r, "little") for r in ranks] == list(range(n)), "allgather of ranks")


def check_store(ctx):
    r, n = ctx.rank, ctx.world_size
    # get with wait across ranks: rank 0 sets the key late, everyone waits
    if r == 0:
        time.sleep(0.3)
        ctx.store_set("late", b"set by rank 0")
    expect(ctx.store_get("late", wait_ms=20000) == b"set by rank 0", "get with wait")
    # str values are UTF-8, a bytearray value is its bytes, empty values exist
    ctx.store_set("v/%d" % r, "r\u00e9%d" % r)
    ctx.store_set(b"b/%d" % r, bytearray(b"\x00\x01\x02"))
    ctx.store_set("empty/%d" % r, b"")
    ctx.store_barrier("after-set")
    peer = (r + 1) % n
    expect(ctx.store_get("v/%d" % peer, 5000) == ("r\u00e9%d" % peer).encode(), "peer's str value")
    expect(ctx.store_get("b/%d" % peer, 5000) == b"\x00\x01\x02", "peer's bytes value")
    expect(ctx.store_get("empty/%d" % peer, 0) == b"", "empty value")
    # add: every rank adds rank + 1
    ctx.store_add("counter", r + 1)
    ctx.store_barrier("after-add")
    expect(ctx.store_add("counter", 0) == n * (n + 1) // 2, "store_add sum")
    # compare-set: exactly one rank wins the empty key
    won = ctx.store_compare_set("leader", None, b"%d" % r)
    wins = ctx.allgather(bytes([int(won)]))
    expect(sum(w[0] for w in wins) == 1, "compare-set winners: %r" % wins)
    winner = [i for i, w in enumerate(wins) if w[0]][0]
    expect(ctx.store_get("leader", 0) == b"%d" % winner, "leader value")
    ctx.barrier()
    keys = ctx.store_num_keys()
    ctx.barrier()
    if r == 0:
        expect(not ctx.store_compare_set("leader", b"nobody", b"x"), "compare-set with a wrong expected")
        expect(ctx.store_get("leader", 0) == b"%d" % winner, "unchanged by a failed compare-set")
        expect(ctx.store_compare_set("leader", b"%d" % winner, b"next"), "compare-set with the right expected")
        expect(ctx.store_get("leader", 0) == b"next", "replaced by compare-set")
        expect(ctx.store_delete("leader"), "delete of a key that was there")
        expect(not ctx.store_delete("leader"), "delete of a key that was not")
    ctx.barrier()
    expect(ctx.store_num_keys() == keys - 1, "store_num_keys after the delete")
    ctx.barrier()
    # allgather of bytes through the store, lengths differing by rank
    got = ctx.store_allgather("ag", b"x" * r + b"%d" % r)
    expect(got == [b"x" * i + b"%d" % i for i in range(n)], "store_allgather: %r" % got)
    # published once, fetched by index: the neighbours, in the order asked
    ctx.store_publish("pub", b"p%d" % r)
    want = [(r + 1) % n, (r + n - 1) % n, r]
    got = ctx.store_fetch("pub", want)
    expect(got == [b"p%d" % i for i in want], "store_fetch: %r" % got)
    expect_raises(msrun.TimeoutError, lambda: ctx.store_fetch("pub", [n + 5], wait_ms=100),
                  "a fetch of an entry never published")
    # a subset: even ranks only
    evens = (n + 1) // 2
    if r % 2 == 0:
        got = ctx.store_allgather("ag-even", b"e%d" % r, index=r // 2, count=evens)
        expect(got == [b"e%d" % (2 * i) for i in range(evens)], "store_allgather of a subset")
        ctx.store_barrier("even-barrier", count=evens)
    ctx.barrier()
    # errors: msrun's status and message in the exception
    e = expect_raises(msrun.NotFoundError, lambda: ctx.store_get("no-such-key", 0), "get at once")
    expect(e.name == "MSR_ERR_NOT_FOUND" and e.call == "msr_store_get", "NotFoundError fields")
    t0 = time.monotonic()
    e = expect_raises(msrun.TimeoutError, lambda: ctx.store_get("no-such-key", 300), "get with wait",
                      contains="no-such-key")
    expect(time.monotonic() - t0 >= 0.25, "get with wait returned before its deadline")
    expect(isinstance(e, msrun.Error) and isinstance(e, TimeoutError), "TimeoutError's bases")
    expect(e.status == -7 and e.name == "MSR_ERR_TIMEOUT" and "MSR_ERR_TIMEOUT" in str(e), "status")
    expect(e.message and e.message != msrun.status_str(-7), "msr_last_error's sentence: %r" % e.message)
    e = expect_raises(msrun.Error, lambda: ctx.store_set("", b"x"), "empty key")
    expect(e.name == "MSR_ERR_BAD_KEY", "empty key: %s" % e.name)
    expect_raises(msrun.InvalidArgumentError,
                  lambda: ctx.store_allgather("too-many", b"x", count=n + 1), "count above the world")
    expect_raises(TypeError, lambda: ctx.store_set(42, b"x"), "a key that is not text")
    # a key with a NUL is refused, never cut at it (written as "nul-a")
    for k in ("nul-a\0b", b"nul-a\0b", bytearray(b"nul-a\0")):
        expect_raises(ValueError, lambda: ctx.store_set(k, b"x"), "key %r" % k, contains="NUL byte")
        expect_raises(ValueError, lambda: ctx.store_add(k, 1), "add %r" % k, contains="NUL byte")
    expect_raises(msrun.NotFoundError, lambda: ctx.store_get("nul-a", 0), "the key cut at its NUL")
    ctx.barrier()


def check_checkpoints(ctx):
    r, n = ctx.rank, ctx.world_size
    d = os.path.join(os.environ["MSRUN_PYTEST_DIR"], "ckpt")
    expect(ctx.ckpt_latest(d) == -1, "no checkpoint yet")
    for step in (1, 2, 3):
        ctx.ckpt_save(d, step, b"rank %d step %d " % (r, step) * (100 * (r + 1)), keep=2)
    expect(ctx.ckpt_latest(d) == 3, "latest step")
    expect(ctx.ckpt_load(d, 3) == b"rank %d step 3 " % r * (100 * (r + 1)), "load round trip")
    other = (r + 1) % n
    expect(ctx.ckpt_load_rank(d, 2, other) == b"rank %d step 2 " % other * (100 * (other + 1)),
           "load_rank of another rank")
    expect(ctx.ckpt_latest_any(d) == (3, n), "latest_any: %r" % (ctx.ckpt_latest_any(d),))
    expect_raises(msrun.NotFoundError, lambda: ctx.ckpt_load(d, 1), "step 1 removed by keep=2")
    ctx.ckpt_save(d, 4, np.arange(10, dtype=np.float64) * r)  # any buffer
    got = np.frombuffer(ctx.ckpt_load(d, 4), dtype=np.float64)
    expect(np.array_equal(got, np.arange(10) * r), "an array saved and loaded")
    ctx.barrier()


def check_report(ctx):
    # msr_report never waits: reports with scalars and without, then the
    # refusals (a bad name, a negative step) as InvalidArgumentError
    for step in range(5):
        ctx.report(step, 0.01, loss=2.5 - 0.1 * step, tok_s=1000 + ctx.rank)
    ctx.report(5)
    expect_raises(msrun.InvalidArgumentError, lambda: ctx.report(6, loss_rate=1, **{"9x": 1}),
                  "a name starting with a digit")
    expect_raises(msrun.InvalidArgumentError, lambda: ctx.report(-1, loss=1), "a negative step")


def check_allreduce(ctx, comm):
    r, n = comm.rank, comm.size
    tri = n * (n + 1) // 2
    for dt in (np.float32, np.float64, np.int32, np.int64, np.float16, np.uint8):
        for count in (1, 7, 1000, 70000):
            base = (np.arange(count) % 50).astype(dt)
            want = (np.arange(count) % 50).astype(np.int64) * tri
            a = base * dt(r + 1)
            got = comm.allreduce(a)  # in place
            expect(got is a, "allreduce returns its buffer")
            expect(np.array_equal(a.astype(np.int64), want.astype(dt).astype(np.int64)),
                   "in place %s x %d" % (np.dtype(dt).name, count))
            src = base * dt(r + 1)
            out = np.full(count, 99, dtype=dt)
            ctx.allreduce(src, out)  # out of place, through the context
            expect(np.array_equal(out, want.astype(dt)), "out of place %s x %d" % (np.dtype(dt).name, count))
            expect(np.array_equal(src, base * dt(r + 1)), "out of place leaves sendbuf")
    # 2-D arrays, every op
    a = np.full((3, 5), r + 1, dtype=np.float64)
    fact = float(np.prod(np.arange(1, n + 1)))
    for op, want in (("sum", tri), ("max", n), ("min", 1), ("prod", fact), ("avg", tri / n)):
        b = a.copy()
        comm.allreduce(b, op=op)
        expect(np.all(b == want), "op %s: %r, want %r" % (op, b[0, 0], want))
    # bytearray (uint8), in place, wrapping around
    ba = bytearray([r + 1, 200, 0]) * 4
    comm.allreduce(ba)
    expect(ba == bytearray([tri % 256, (200 * n) % 256, 0]) * 4, "bytearray: %r" % ba)
    # bfloat16 bits in a uint16 array: 1.0 on every rank sums to n
    one = np.array([1.0] * 5, np.float32).view(np.uint32) >> 16
    bf = one.astype(np.uint16)
    comm.allreduce(bf, dtype="bf16")
    expect(np.all(bf == (np.array([n], np.float32).view(np.uint32) >> 16)[0]), "bf16: %r" % bf)
    # a read-only input is fine out of place
    out = np.zeros(4, np.float32)
    comm.allreduce(np.ones(4, np.float32).tobytes(), out, dtype="f32")
    expect(np.all(out == n), "bytes as a read-only input")
    # refusals, before anything is sent: the communicator stays usable
    expect_raises(TypeError, lambda: comm.allreduce(np.zeros(3, np.uint32)), "uint32", contains="'I'")
    expect_raises(TypeError, lambda: comm.allreduce(np.zeros(3, np.int16)), "int16")
    expect_raises(TypeError, lambda: comm.allreduce(np.zeros(3, np.complex64)), "complex64")
    expect_raises(TypeError, lambda: comm.allreduce([1.0, 2.0]), "a list", contains="no buffer")
    expect_raises(TypeError, lambda: comm.allreduce(np.zeros(3, np.float32), dtype="f128"), "dtype name")
    expect_raises(ValueError, lambda: comm.allreduce(np.zeros((4, 4), np.float32)[:, 1]), "strided",
                  contains="not contiguous")
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    expect_raises(ValueError, lambda: comm.allreduce(ro), "read-only", contains="read-only")
    expect_raises(ValueError, lambda: comm.allreduce(b"abcd"), "bytes in place", contains="read-only")
    expect_raises(ValueError, lambda: comm.allreduce(np.zeros(4, np.float32), np.zeros(5, np.float32)),
                  "sizes differ")
    expect_raises(TypeError, lambda: comm.allreduce(np.zeros(4, np.float32), np.zeros(4, np.float64)),
                  "dtypes differ")
    expect_raises(ValueError, lambda: comm.allreduce(np.zeros(4, np.float32), op="mean"), "op name")
    expect_raises(ValueError, lambda: comm.allreduce(np.zeros(3, np.uint8), dtype="f32"),
                  "bytes not a whole number of elements")
    e = expect_raises(msrun.InvalidArgumentError, lambda: comm.broadcast(np.zeros(4), root=n), "root = size")
    expect(e.call == "msr_comm_broadcast" and e.message, "broadcast's error: %r" % str(e))
    expect(comm.status() == 0, "the communicator is still healthy")
    a = np.ones(3, np.int32)
    comm.allreduce(a)
    expect(np.all(a == n), "allreduce after refusals")


def check_collectives(ctx, comm):
    r, n = comm.rank, comm.size
    # broadcast from the last rank
    b = np.arange(10, dtype=np.int64) * (r + 1)
    comm.broadcast(b, root=n - 1)
    expect(np.array_equal(b, np.arange(10) * n), "broadcast")
    # reduce to root 0, in place there, input elsewhere
    a = np.full(6, r + 1, np.float32)
    comm.reduce(a, op="sum", root=0)
    if r == 0:
        expect(np.all(a == n * (n + 1) // 2), "reduce in place at the root")
    out = np.zeros(6, np.float32)
    comm.reduce(np.full(6, r + 1, np.float32), out, op="max", root=0)
    if r == 0:
        expect(np.all(out == n), "reduce out of place")
    # allgather, out of place and in place
    mine = np.full(3, r, np.int32)
    all_ = np.zeros(3 * n, np.int32)
    comm.allgather(mine, all_)
    expect(np.array_equal(all_, np.repeat(np.arange(n), 3)), "allgather")
    buf = np.zeros(3 * n, np.int32)
    buf[3 * r : 3 * r + 3] = r
    comm.allgather(buf)
    expect(np.array_equal(buf, np.repeat(np.arange(n), 3)), "allgather in place")
    # reduce_scatter: block j of every input is j + rank
    inp = np.repeat(np.arange(n, dtype=np.float64), 4) + r
    outb = np.zeros(4, np.float64)
    comm.reduce_scatter(inp, outb)
    expect(np.all(outb == n * r + n * (n - 1) / 2), "reduce_scatter")
    inp2 = inp.copy()
    comm.reduce_scatter(inp2)
    expect(np.all(inp2[4 * r : 4 * r + 4] == n * r + n * (n - 1) / 2), "reduce_scatter in place")
    # alltoall: block j goes to rank j
    send = np.array([100 * r + j for j in range(n) for _ in range(2)], np.int64)
    recv = np.zeros(2 * n, np.int64)
    comm.alltoall(send, recv)
    expect(np.array_equal(recv, np.array([100 * j + r for j in range(n) for _ in range(2)])), "alltoall")
    comm.alltoall(send)
    expect(np.array_equal(send, recv), "alltoall in place")
    # alltoallv: rank r sends j + 1 elements to rank j
    scounts = [j + 1 for j in range(n)]
    sdispls = [sum(scounts[:j]) for j in range(n)]
    rcounts = [r + 1] * n
    rdispls = [j * (r + 1) for j in range(n)]
    sv = np.concatenate([np.full(j + 1, 10 * r + j, np.int32) for j in range(n)])
    rv = np.zeros(n * (r + 1), np.int32)
    comm.alltoallv(sv, scounts, sdispls, rv, rcounts, rdispls)
    expect(np.array_equal(rv, np.repeat(np.array([10 * j + r for j in range(n)], np.int32), r + 1)),
           "alltoallv")
    rv2 = np.zeros_like(rv)
    req = comm.ialltoallv(sv, scounts, sdispls, rv2, rcounts, rdispls)
    del scounts, sdispls  # the request keeps its own copies alive
    msrun.wait_all([req, None])
    expect(np.array_equal(rv2, rv), "ialltoallv")
    # point to point around the ring
    if n > 1:
        nxt, prv = (r + 1) % n, (r - 1) % n
        got = np.zeros(5, np.float32)
        req = comm.irecv(got, prv, tag=7)
        comm.send(np.full(5, r, np.float32), nxt, tag=7)
        expect(req.wait() is got, "irecv returns its buffer")
        expect(np.all(got == prv), "ring send/recv")
        expect(req.done, "a finished request is done")
    # non-blocking collectives together, then wait in another order
    x = np.ones(100, np.float32)
    y = np.full(50, r, np.int64)
    rx = comm.iallreduce(x)
    ry = comm.ibroadcast(y, root=0)
    rb = comm.ibarrier()
    rb.wait()
    ry.wait()
    while not rx.test():
        pass
    expect(np.all(x == n) and np.all(y == 0), "non-blocking allreduce and broadcast")
    comm.barrier()
    # split into even and odd ranks, ranked backwards; dup
    sub = comm.split(r % 2, key=-r)
    expect(sub.size == (n + 1 - r % 2) // 2, "split size %d" % sub.size)
    members = [i for i in range(n) if i % 2 == r % 2]
    expect(sub.world_rank(sub.rank) == r and sub.rank == len(members) - 1 - members.index(r), "split rank")
    s = np.array([r], np.int64)
    sub.allreduce(s)
    expect(s[0] == sum(members), "allreduce on the split")
    expect(comm.split(msrun.COMM_NO_COLOR) is None, "no color: no communicator")
    with comm.dup() as d:
        z = np.ones(8, np.float64)
        d.allreduce(z)
        expect(np.all(z == n) and d.size == n, "allreduce on a dup")
    sub.destroy()
    sub.destroy()  # twice does nothing
    expect_raises(msrun.Error, lambda: sub.barrier(), "a destroyed communicator")


def check_recv_any(comm):
    """Every other rank sends to rank 0 at once: rank 0's receives from any
    source (one non-blocking among them) hear each sender once, the value
    naming the sender reported. Then receives of the wrong length raise
    MSR_ERR_TRUNCATED naming the real sender and both sizes, and the
    communicator stays usable."""
    n, r = comm.size, comm.rank
    if r > 0:
        comm.send(np.full(3, r, np.int64), 0, tag=9)
    else:
        got = [np.full(3, -1, np.int64) for _ in range(n - 1)]
        srcs = []
        if n > 1:
            req = comm.irecv_any(got[0], tag=9)
            srcs = [comm.recv_any(g, tag=9) for g in got[1:]]
            srcs.insert(0, req.wait())
        expect(sorted(srcs) == list(range(1, n)), "recv_any: senders %r" % srcs)
        for s, g in zip(srcs, got):
            expect(np.all(g == s), "recv_any: %r credited to rank %d" % (g, s))
    comm.barrier()
    if n < 2:
        return
    # rank 1 to rank 0: 4 elements into 2 (blocking and not), 1 into 2
    if r == 1:
        for count in (4, 4, 1):
            comm.send(np.arange(count, dtype=np.int64), 0, tag=10)
    elif r == 0:
        small = np.zeros(2, np.int64)
        cases = [(lambda: comm.recv_any(small, tag=10), "has 32 bytes, more than the buffer's 16"),
                 (lambda: comm.irecv_any(small, tag=10).wait(),
                  "has 32 bytes, more than the buffer's 16"),
                 (lambda: comm.recv_any(small, tag=10), "has 8 bytes, fewer than the 16 expected")]
        for fn, text in cases:
            e = expect_raises(msrun.Error, fn, "recv_any of the wrong length",
                              contains="the message from rank 1 " + text)
            expect(e.name == "MSR_ERR_TRUNCATED" and e.call == "msr_comm_recv_any",
                   "recv_any of the wrong length: %s from %s" % (e.name, e.call))
        expect(comm.status() == 0, "a wrong length broke the communicator")
    comm.barrier()


def check_store_wait(ctx):
    """store_wait_change: rank 0 is released by rank 1's set, not by a set
    of the same value, gets None once the key is deleted, and times out
    when nothing changes."""
    r = ctx.rank
    if r == 1:
        ctx.store_set("wc", b"a")
        ctx.store_get("wc-got-a", 20000)
        ctx.store_set("wc", b"a")  # the same value: no change
        ctx.store_set("wc", b"b")
        ctx.store_get("wc-got-b", 20000)
        ctx.store_delete("wc")
    elif r == 0 and ctx.world_size > 1:
        got = ctx.store_wait_change("wc", None, 20000)
        expect(got == b"a", "wait_change from absent: %r" % got)
        ctx.store_set("wc-got-a", b"")
        got = ctx.store_wait_change("wc", "a", 20000)
        expect(got == b"b", "wait_change past a write of the same value: %r" % got)
        ctx.store_set("wc-got-b", b"")
        expect(ctx.store_wait_change("wc", b"b", 20000) is None, "wait_change of a deleted key")
    if r == 0:
        # the deadline: an absent key stays absent, a value stays the same
        for wait_ms in (0, 200):
            e = expect_raises(msrun.TimeoutError, lambda: ctx.store_wait_change("wc-none", None, wait_ms),
                              "wait_change of an absent key, %d ms" % wait_ms)
            expect(e.call == "msr_store_wait_change", "wait_change's error names %s" % e.call)
        ctx.store_set("wc-same", bytearray(b"x\x00y"))
        ctx.store_set("wc-same", b"x\x00y")
        expect_raises(msrun.TimeoutError, lambda: ctx.store_wait_change("wc-same", b"x\x00y", 200),
                      "wait_change after a write of the same value")
        expect(ctx.store_wait_change("wc-same", b"x", 0) == b"x\x00y", "a value other than old")
        expect(ctx.store_wait_change("wc-never", b"x", 0) is None, "old given, key absent")
    ctx.store_barrier("after-wait-change")


def main():
    with msrun.init() as ctx:
        check_context(ctx)
        check_store(ctx)
        check_checkpoints(ctx)
        check_report(ctx)
        comm = ctx.comm_world()
        expect(comm.rank == ctx.rank and comm.size == ctx.world_size, "world comm rank and size")
        expect(comm.backend == "ucx", "backend %s" % comm.backend)
        check_allreduce(ctx, comm)
        check_collectives(ctx, comm)
        check_recv_any(comm)
        check_store_wait(ctx)
        ctx.barrier()
        print("rank %d of %d: api ok" % (ctx.rank, ctx.world_size), flush=True)
    # finalize destroyed the communicators; a second finalize does nothing
    ctx.finalize()
    expect_raises(msrun.Error, lambda: ctx.rank, "a finalized context")


if __name__ == "__main__":
    main()
