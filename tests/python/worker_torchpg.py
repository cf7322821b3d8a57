"""torch.distributed's "msrun" backend (msrun.torch) against Gloo in the
same job, on the same inputs: the default group is Gloo over msrun's store
(init_method="msrun://"), and dist.new_group(backend="msrun") gives the msrun
group of every rank. Each collective's result is compared with Gloo's (or,
where Gloo has no such call, with the result computed from every rank's
input): integers equal, floats bitwise on 2 ranks (a sum of two operands
has one order) and within a few units in the last place on more (the fold
orders differ: 1e-5 for float32, 1e-12 for float64).
Also: gather, scatter and all_gather_coalesced against Gloo's; the store
(set, get, add, compare_set, delete, check, wait), async work and futures,
a send/recv wait(timeout) bounded by its own timeout, recv without src
(beside Gloo's, and on a sub-group), sub-groups with ranks
outside them, tags at their bound, and the calls refused with their error
(roots, list lengths and sizes at their bounds and one past). Prints "rank R of N: torchpg ok"."""

import os
from datetime import timedelta

from torch_worker import dist, mt, torch

R = N = 0
PG = None  # the msrun group of every rank
DTYPES = (torch.float32, torch.float64, torch.int32, torch.int64)
SIZES = (1, 1000, 70001)


def expect(cond, what):
    if not cond:
        raise AssertionError("rank %d: %s" % (R, what))


def same(a, b, what):
    """Integers equal; floats bitwise on 2 ranks, within 1e-6 on more."""
    expect(a.dtype == b.dtype and a.shape == b.shape, "%s: %s %s vs %s %s" % (what, a.dtype, tuple(a.shape), b.dtype, tuple(b.shape)))
    if a.is_floating_point() and N > 2:
        tol = 1e-12 if a.dtype == torch.float64 else 1e-5  # a few units in the last place
        expect(torch.allclose(a.double(), b.double(), rtol=tol, atol=tol), "%s: differs" % what)
    else:
        expect(torch.equal(a, b), "%s: differs (max diff %s)" % (what, (a.double() - b.double()).abs().max().item()))


def data(rank, count, dtype, salt=0):
    """Rank's input: the same on every rank that asks."""
    g = torch.Generator().manual_seed(1000 * salt + 17 * rank + count)
    if dtype.is_floating_point:
        return (torch.randn(count, generator=g, dtype=torch.float64) * 3).to(dtype)
    return torch.randint(-50, 50, (count,), generator=g, dtype=torch.int64).to(dtype)


def check_store():
    s = mt.store()
    s.set("k/%d" % R, "v%d" % R)
    for q in range(N):
        expect(s.get("k/%d" % q) == ("v%d" % q).encode(), "store get of rank %d's key" % q)
    expect(s.add("counter", 2) % 2 == 0, "store add")
    dist.barrier()
    expect(s.add("counter", 0) == 2 * N, "store counter after the barrier")
    expect(int(s.get("counter")) == 2 * N, "a counter reads as decimal text")
    # compare_set: one winner; the loser reads the winner's value
    got = s.compare_set("cas", "", "rank%d" % R)
    dist.barrier()
    winner = s.get("cas")
    expect(got == winner, "compare_set returns the value now stored")
    expect(s.compare_set("cas", "wrong", "x") == winner, "a wrong expected value swaps nothing")
    dist.barrier()
    if R == 0:
        expect(s.compare_set("cas", winner, "last") == b"last", "the right expected value swaps")
        expect(s.compare_set("absent", "exp", "x") == b"exp", "absent key, expected given")
    dist.barrier()
    expect(s.get("cas") == b"last", "compare_set's swap seen by all")
    s.wait(["k/%d" % q for q in range(N)], timedelta(seconds=10))
    try:
        s.wait(["never-set"], timedelta(milliseconds=300))
    except RuntimeError as e:
        expect("MSR_ERR_TIMEOUT" in str(e), "wait's error: %s" % e)
    else:
        raise AssertionError("wait for a key never set returned")
    dist.barrier()
    if R == 0:
        expect(s.delete_key("cas") and not s.delete_key("cas"), "store delete_key")
    dist.barrier()
    # num_keys: the job's keys (the group's own too), the same on every
    # rank while nobody writes, and one more once a rank set one
    before = s.num_keys()
    expect(before >= N + 1, "num_keys %d counts the k/* keys and the counter" % before)
    dist.barrier()
    if R == 0:
        s.set("numkeys/new", "x")
    dist.barrier()
    expect(s.num_keys() == before + 1, "num_keys after rank 0 set a key")
    dist.barrier()
    if R == 0:
        expect(s.delete_key("numkeys/new"), "store delete_key of numkeys/new")
    dist.barrier()
    expect(s.num_keys() == before, "num_keys after the delete")
    dist.barrier()


def check_allreduce():
    ops = (dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX)
    for dtype in DTYPES:
        for count in SIZES:
            for op in ops:
                if op == dist.ReduceOp.PRODUCT and count > 1000:
                    continue
                x = data(R, count, dtype)
                if op == dist.ReduceOp.PRODUCT and not dtype.is_floating_point:
                    x = x % 3
                m, g = x.clone(), x.clone()
                dist.all_reduce(m, op=op, group=PG)
                dist.all_reduce(g, op=op)
                same(m, g, "allreduce %s %s x%d" % (op, dtype, count))
            # avg: Gloo has none; its sum divided by the size
            m, g = data(R, count, dtype), data(R, count, dtype)
            dist.all_reduce(m, op=dist.ReduceOp.AVG, group=PG)
            dist.all_reduce(g)
            ref = g / N if dtype.is_floating_point else torch.div(g, N, rounding_mode="trunc")
            if dtype.is_floating_point:
                tol = 1e-12 if dtype == torch.float64 else 1e-5
                expect(torch.allclose(m.double(), ref.double(), rtol=tol, atol=tol), "avg %s" % dtype)
            else:
                expect(torch.equal(m, ref), "avg %s" % dtype)
    # float16 and bfloat16 against the float64 sum of the same inputs
    for dtype in (torch.float16, torch.bfloat16):
        m = data(R, 1000, dtype)
        dist.all_reduce(m, group=PG)
        ins = [data(q, 1000, dtype).double() for q in range(N)]
        bound = N * 2.0 ** -7 * sum(x.abs() for x in ins) + 1e-3
        expect(bool(((m.double() - sum(ins)).abs() <= bound).all()), "allreduce %s" % dtype)
    # not contiguous: a transposed tensor, the result written back into it
    base = data(R, 600, torch.float32).view(20, 30)
    m = base.t()
    expect(not m.is_contiguous(), "the test's tensor is strided")
    g = m.contiguous()
    dist.all_reduce(m, group=PG)
    dist.all_reduce(g)
    same(m.contiguous(), g, "allreduce of a transposed tensor")
    same(base.t().contiguous(), g, "the result is in the caller's storage")


def check_rooted():
    for root in range(N):
        for dtype in DTYPES + (torch.int8, torch.bool):
            x = data(R, 1000, torch.int64 if dtype == torch.bool else dtype, salt=root)
            x = (x > 0) if dtype == torch.bool else x.to(dtype)
            m, g = x.clone(), x.clone()
            dist.broadcast(m, root, group=PG)
            if dtype in DTYPES:
                dist.broadcast(g, root)
            else:  # Gloo has no bool: the root's input (moved as bytes)
                g = data(root, 1000, torch.int64 if dtype == torch.bool else dtype, salt=root)
                g = (g > 0) if dtype == torch.bool else g.to(dtype)
            same(m, g, "broadcast %s from %d" % (dtype, root))
        x = data(R, 5000, torch.float32, salt=root)
        m, g = x.clone(), x.clone()
        dist.reduce(m, root, group=PG)
        dist.reduce(g, root)
        if R == root:
            same(m, g, "reduce to %d" % root)
        else:
            same(m, x, "reduce leaves a non-root's tensor as it was")


def check_gathers():
    for dtype in DTYPES + (torch.float16, torch.bfloat16):
        x = data(R, 333, dtype)
        outs = [torch.empty_like(x) for _ in range(N)]
        dist.all_gather(outs, x, group=PG)
        for q in range(N):
            expect(torch.equal(outs[q], data(q, 333, dtype)), "allgather %s block %d" % (dtype, q))
        # the chunks of one tensor: gathered in place
        whole = torch.full((N * 333,), 7, dtype=dtype)
        dist.all_gather(list(whole.chunk(N)), x, group=PG)
        expect(torch.equal(whole, torch.cat([data(q, 333, dtype) for q in range(N)])), "allgather %s into chunks" % dtype)
        flat = torch.empty(N * 333, dtype=dtype)
        dist.all_gather_into_tensor(flat, x, group=PG)
        expect(torch.equal(flat, torch.cat([data(q, 333, dtype) for q in range(N)])), "all_gather_into_tensor %s" % dtype)
    # reduce_scatter (Gloo has none: against Gloo's allreduce, sliced)
    for dtype in DTYPES:
        ins = [data(R, 100, dtype, salt=q) for q in range(N)]
        out = torch.empty(100, dtype=dtype)
        dist.reduce_scatter(out, ins, group=PG)
        g = torch.cat(ins)
        dist.all_reduce(g)
        same(out, g[R * 100:(R + 1) * 100], "reduce_scatter %s" % dtype)
        out2 = torch.empty(100, dtype=dtype)
        dist.reduce_scatter_tensor(out2, torch.cat(ins), group=PG)
        same(out2, out, "reduce_scatter_tensor %s" % dtype)


def check_gather_scatter():
    """gather and scatter against Gloo's, every root, bitwise (data moves,
    nothing is reduced); types Gloo lacks against the root's inputs. The
    first and the last rank as the root (the middle ones add no case)."""
    for root in sorted({0, N - 1}):
        at_root = R == root
        for dtype in DTYPES + (torch.float16, torch.int8, torch.bfloat16, torch.bool):
            gloo = dtype in DTYPES + (torch.float16, torch.int8)
            x = data(R, 333, torch.int64 if dtype == torch.bool else dtype, salt=root)
            x = (x > 0) if dtype == torch.bool else x.to(dtype)
            want = [data(q, 333, torch.int64 if dtype == torch.bool else dtype, salt=root) for q in range(N)]
            want = [(w > 0) if dtype == torch.bool else w.to(dtype) for w in want]
            m = [torch.zeros_like(x) for _ in range(N)] if at_root else None
            g = [torch.zeros_like(x) for _ in range(N)] if at_root else None
            dist.gather(x, m, root, group=PG)
            if gloo:
                dist.gather(x, g, root)
            for q in range(N if at_root else 0):
                expect(torch.equal(m[q], want[q]), "gather %s to %d: block %d" % (dtype, root, q))
                expect(not gloo or torch.equal(m[q], g[q]), "gather %s to %d: block %d vs Gloo" % (dtype, root, q))
            # scatter: block q of the root's list goes to rank q
            ins = want if at_root else None
            m, g = torch.zeros_like(x), torch.zeros_like(x)
            dist.scatter(m, ins, root, group=PG)
            expect(torch.equal(m, want[R]), "scatter %s from %d" % (dtype, root))
            if gloo:
                dist.scatter(g, ins, root)
                expect(torch.equal(m, g), "scatter %s from %d vs Gloo" % (dtype, root))
        # large, and strided tensors both ways: the transposes of (30, 20)
        x = data(R, 70001, torch.float32, salt=root)
        m = [torch.empty_like(x) for _ in range(N)] if at_root else None
        g = [torch.empty_like(x) for _ in range(N)] if at_root else None
        dist.gather(x, m, root, group=PG)
        dist.gather(x, g, root)
        for q in range(N if at_root else 0):
            same(m[q], g[q], "gather of 70001 floats, block %d" % q)
        x = data(R, 600, torch.float64, salt=root).view(30, 20).t()
        m = [torch.zeros(30, 20, dtype=torch.float64).t() for _ in range(N)] if at_root else None
        g = [torch.zeros(20, 30, dtype=torch.float64) for _ in range(N)] if at_root else None
        dist.gather(x, m, root, group=PG)
        dist.gather(x.contiguous(), g, root)
        for q in range(N if at_root else 0):
            expect(not m[q].is_contiguous(), "the test's output is strided")
            same(m[q].contiguous(), g[q], "gather into strided outputs, block %d" % q)
        ins = [data(q, 600, torch.float64, salt=root + 9).view(30, 20).t() for q in range(N)] if at_root else None
        m = torch.zeros(30, 20, dtype=torch.float64).t()
        dist.scatter(m, ins, root, group=PG)
        want = data(R, 600, torch.float64, salt=root + 9).view(30, 20).t()
        same(m.contiguous(), want.contiguous(), "scatter of strided tensors from %d" % root)


def check_allgather_coalesced():
    """all_gather_coalesced against Gloo's; then several dtypes in one call
    (torch's Python refuses that: the group's own method) against the inputs."""
    for dtype in DTYPES + (torch.float16,):
        ins = [data(R, 1 + 50 * i, dtype, salt=i) for i in range(3)]
        ins[2] = data(R, 120, dtype, salt=2).view(10, 12).t()  # strided
        m = [[torch.zeros_like(t) for t in ins] for _ in range(N)]
        g = [[torch.zeros_like(t) for t in ins] for _ in range(N)]
        dist.all_gather_coalesced(m, ins, group=PG)
        dist.all_gather_coalesced(g, ins)
        for q in range(N):
            for i in range(3):
                same(m[q][i], g[q][i], "all_gather_coalesced %s: rank %d's tensor %d" % (dtype, q, i))
        expect(torch.equal(m[N - 1][1], data(N - 1, 51, dtype, salt=1)), "all_gather_coalesced %s: the data" % dtype)

    def mixed(rank):
        return [data(rank, 3, torch.int64).to(torch.int8), data(rank, 5, torch.float32),
                data(rank, 4, torch.float64).view(2, 2), (data(rank, 7, torch.int64) > 0)]
    outs = [[torch.zeros_like(t) for t in mixed(R)] for _ in range(N)]
    PG.allgather_coalesced(outs, mixed(R)).wait()
    for q in range(N):
        for i, t in enumerate(mixed(q)):
            expect(torch.equal(outs[q][i], t), "allgather_coalesced of mixed dtypes: rank %d's %s" % (q, t.dtype))


def check_p2p_timeout():
    """wait(timeout) on a recv whose message is not sent: raises after its
    own timeout (not the group's 60 s deadline), the recv stays posted, and
    a later wait gets the message the peer sends once told of the timeout."""
    s = mt.store()
    if R == 0:
        r = torch.zeros(100)
        w = dist.irecv(r, 1, group=PG, tag=5)
        try:
            w.wait(timedelta(milliseconds=200))
        except RuntimeError as e:
            expect("timed out after 200 ms" in str(e), "wait(timeout)'s error: %s" % e)
        else:
            raise AssertionError("wait(timeout) on a message never sent returned")
        expect(not w.is_completed(), "the recv is still in flight after the timeout")
        s.set("p2p-timeout/raised", "1")
        expect(w.wait(timedelta(seconds=30)), "the second wait")
        expect(torch.equal(r, data(1, 100, torch.float32)), "the message after the timeout")
    elif R == 1:
        s.wait(["p2p-timeout/raised"])
        w = dist.isend(data(1, 100, torch.float32), 0, group=PG, tag=5)
        expect(w.wait(timedelta(seconds=30)) and w.is_completed(), "a send's wait(timeout)")
    dist.barrier(group=PG)


def check_alltoall():
    x = data(R, 12 * N, torch.float32).view(4 * N, 3)
    m, g = torch.empty_like(x), torch.empty_like(x)
    dist.all_to_all_single(m, x, group=PG)
    dist.all_to_all_single(g, x)
    same(m, g, "all_to_all_single, equal splits")
    # rank q sends q + j + 1 rows to rank j
    ins = [R + j + 1 for j in range(N)]
    outs = [q + R + 1 for q in range(N)]
    x = data(R, sum(ins) * 3, torch.float64).view(-1, 3)
    m, g = torch.empty(sum(outs), 3, dtype=torch.float64), torch.empty(sum(outs), 3, dtype=torch.float64)
    dist.all_to_all_single(m, x, outs, ins, group=PG)
    dist.all_to_all_single(g, x, outs, ins)
    same(m, g, "all_to_all_single with split sizes")
    # the list form (Gloo has none): block j of rank q is data(q, ..., salt=j)
    ins = [data(R, 10 + j, torch.int64, salt=j) for j in range(N)]
    outs = [torch.empty(10 + R, dtype=torch.int64) for _ in range(N)]
    dist.all_to_all(outs, ins, group=PG)
    for q in range(N):
        expect(torch.equal(outs[q], data(q, 10 + R, torch.int64, salt=R)), "all_to_all block from %d" % q)


def check_p2p_async():
    nxt, prv = (R + 1) % N, (R - 1) % N
    for tag in (0, mt._C.TAG_MAX):  # pylint: disable=protected-access
        s = data(R, 1 << 16, torch.float32)
        r = torch.empty(256, 256).t()  # a strided receive
        reqs = [dist.isend(s, nxt, group=PG, tag=tag), dist.irecv(r, prv, group=PG, tag=tag)]
        for q in reqs:
            q.wait()
        # the message fills the strided tensor in its logical order
        expect(torch.equal(r.contiguous().view(-1), data(prv, 1 << 16, torch.float32)),
               "recv into a strided tensor, tag %d" % tag)
    try:
        dist.send(torch.zeros(1), nxt, group=PG, tag=mt._C.TAG_MAX + 1)  # pylint: disable=protected-access
    except ValueError as e:
        expect("tag" in str(e), str(e))
    else:
        raise AssertionError("a tag past the bound was sent")
    # async collectives: wait(), and a future chained as DDP's hooks do
    t = torch.full((1000,), float(R + 1))
    work = dist.all_reduce(t, group=PG, async_op=True)
    fut = work.get_future().then(lambda f: f.value()[0] * 2)
    expect(work.wait() and work.is_completed(), "work state")
    expect(bool((fut.wait() == N * (N + 1)).all()), "future value")
    works = [dist.all_reduce(torch.ones(10 * i + 1), group=PG, async_op=True) for i in range(20)]
    for i, w in enumerate(works):
        w.wait()
        expect(bool((w.result()[0] == N).all()), "queued work %d" % i)
    dist.barrier(group=PG)


def check_recv_anysource():
    """dist.recv without src, on the msrun group beside Gloo's: every other
    rank sends its rank to rank 0 (tag 3, then dist.irecv without src with
    the largest tag), which hears each once and learns who sent it; on a
    sub-group of ranks 0 and N-1 the sender comes back as a job rank
    (torch maps the group's rank the backend answers)."""
    for group in (PG, None):
        name = "msrun" if group is PG else "gloo"
        for tag in (3, mt._C.TAG_MAX):  # pylint: disable=protected-access
            if R != 0:
                dist.send(torch.full((5,), float(R)), 0, group=group, tag=tag)
                continue
            seen = []
            for _ in range(N - 1):
                t = torch.empty(5)
                if tag == 3:
                    src = dist.recv(t, group=group, tag=tag)
                else:
                    w = dist.irecv(t, group=group, tag=tag)
                    w.wait()
                    src = w._source_rank()  # pylint: disable=protected-access
                expect(bool((t == float(src)).all()), "%s recv from any source: %s from %d" % (name, t[0].item(), src))
                seen.append(src)
            expect(sorted(seen) == list(range(1, N)), "%s recv from any source: senders %s" % (name, seen))
    sub = dist.new_group([0, N - 1], backend="msrun")
    if R == N - 1:
        dist.send(torch.full((2,), 7.0), 0, group=sub)
    elif R == 0:
        t = torch.empty(2)
        src = dist.recv(t, group=sub)
        expect(src == N - 1 and bool((t == 7.0).all()), "sub-group recv from any source: %d" % src)
    # a named recv answers its peer; a send has no source
    nxt, prv = (R + 1) % N, (R - 1) % N
    s, r = dist.isend(torch.ones(1), nxt, group=PG), dist.irecv(torch.empty(1), prv, group=PG)
    s.wait()
    r.wait()
    expect(r._source_rank() == prv, "named recv's source rank")  # pylint: disable=protected-access
    try:
        s._source_rank()  # pylint: disable=protected-access
    except RuntimeError:
        pass
    else:
        raise AssertionError("a send answered a source rank")
    dist.barrier(group=PG)


def check_subgroups():
    ranks = [0, N - 1]
    sub = dist.new_group(ranks, backend="msrun")
    gsub = dist.new_group(ranks)
    if R in ranks:
        x = data(R, 5000, torch.float32)
        m, g = x.clone(), x.clone()
        dist.all_reduce(m, group=sub)
        dist.all_reduce(g, group=gsub)
        same(m, g, "sub-group allreduce")
        expect(sub.size() == 2 and sub.rank() == ranks.index(R), "sub-group rank and size")
    else:
        expect(sub == dist.GroupMember.NON_GROUP_MEMBER, "a non-member gets no group")
    odd = dist.new_group([q for q in range(N) if q % 2], backend="msrun")
    if R % 2:
        t = torch.ones(7)
        dist.all_reduce(t, group=odd)
        expect(bool((t == N // 2).all()), "odd ranks' group")
    # the world group still works after the splits
    t = torch.ones(3)
    dist.all_reduce(t, group=PG)
    expect(bool((t == N).all()), "world after splits")


def check_refusals():
    def refused(call, words, what):
        try:
            call()
        except (RuntimeError, ValueError) as e:
            expect(all(w in str(e) for w in words), "%s: %s" % (what, e))
        else:
            raise AssertionError("%s was accepted" % what)

    refused(lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.BAND, group=PG), ["not supported"], "BAND")
    refused(lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16), group=PG), ["cannot be reduced"], "int16 sum")
    # gather, scatter, allgather_coalesced: roots at their bound and one
    # past, wrong list lengths, sizes and dtypes (refused before anything is
    # sent, so the ranks need not agree on the refused calls)
    x = torch.ones(4)

    def gather_opts(root):
        o = dist.GatherOptions()
        o.rootRank = root
        return o

    def scatter_opts(root):
        o = dist.ScatterOptions()
        o.rootRank = root
        return o
    outs = [[torch.empty(4) for _ in range(N)]]
    refused(lambda: PG.gather(outs, [x], gather_opts(N)), ["root %d outside 0..%d" % (N, N - 1)], "gather to root N")
    refused(lambda: PG.gather(outs, [x], gather_opts(-1)), ["root -1 outside"], "gather to root -1")
    refused(lambda: PG.scatter([x], outs, scatter_opts(N)), ["root %d outside" % N], "scatter from root N")
    refused(lambda: PG.gather(outs, [x], gather_opts((R + 1) % N)), ["not the root"], "gather outputs on a non-root")
    refused(lambda: PG.scatter([x], outs, scatter_opts((R + 1) % N)), ["not the root"], "scatter inputs on a non-root")
    refused(lambda: dist.gather(x, [torch.empty(4)] * (N - 1), R, group=PG),
            ["one list of %d output tensors (got %d tensors)" % (N, N - 1)], "gather with N-1 outputs")
    refused(lambda: dist.gather(x, [torch.empty(4)] * (N + 1), R, group=PG),
            ["one list of %d output tensors (got %d tensors)" % (N, N + 1)], "gather with N+1 outputs")
    refused(lambda: dist.scatter(x, [torch.ones(4)] * (N + 1), R, group=PG),
            ["one list of %d input tensors" % N], "scatter with N+1 inputs")
    refused(lambda: dist.gather(x, [torch.empty(4)] * (N - 1) + [torch.empty(5)], R, group=PG),
            ["of 5 elements where 4 were expected"], "gather into a wrong size")
    refused(lambda: dist.scatter(x, [torch.ones(3)] * N, R, group=PG),
            ["of 3 elements where 4 were expected"], "scatter of a wrong size")
    refused(lambda: PG.gather([[torch.empty(4, dtype=torch.float64)] * N], [x], gather_opts(R)),
            ["different dtypes"], "gather into another dtype")
    refused(lambda: dist.all_gather_coalesced([[x]] * (N - 1), [x], group=PG),
            ["%d output lists" % N], "all_gather_coalesced with N-1 lists")
    refused(lambda: dist.all_gather_coalesced([[x, x]] * N, [x], group=PG),
            ["an output list of 2 tensors for 1 inputs"], "all_gather_coalesced with a long list")
    refused(lambda: dist.all_gather_coalesced([[torch.empty(5)]] * N, [x], group=PG),
            ["has 5 elements, its input 4"], "all_gather_coalesced into a wrong size")
    refused(lambda: PG.allgather_coalesced([[]] * N, []), ["no input tensors"], "all_gather_coalesced of nothing")
    refused(lambda: dist.all_gather_into_tensor(torch.empty(3), torch.ones(4), group=PG), ["times the input"], "a wrong allgather size")
    # the group is still usable after refusals (nothing was sent)
    t = torch.ones(2)
    dist.all_reduce(t, group=PG)
    expect(bool((t == N).all()), "the group after refusals")


def main():
    global R, N, PG
    torch.set_num_threads(1)
    # importing msrun.torch told libmsrun that the waits run beside the
    # training thread (the engine's choice from it: test_bind.sh)
    expect(os.environ.get("MSR_COMM_BESIDE_COMPUTE") == "1", "MSR_COMM_BESIDE_COMPUTE after the import")
    dist.init_process_group("gloo", init_method="msrun://", timeout=timedelta(seconds=60))
    R, N = dist.get_rank(), dist.get_world_size()
    expect(R == mt.context().rank and N == mt.context().world_size, "msrun:// gives the job's rank and size")
    PG = dist.new_group(backend="msrun")
    expect(PG.size() == N and PG.rank() == R and dist.get_backend(PG) == "msrun", "the msrun group")
    for check in (check_store, check_allreduce, check_rooted, check_gathers, check_gather_scatter,
                  check_allgather_coalesced, check_alltoall, check_p2p_async, check_p2p_timeout,
                  check_recv_anysource, check_subgroups, check_refusals):
        check()
        print("rank %d: %s passed" % (R, check.__name__), flush=True)
    dist.destroy_process_group()
    print("rank %d of %d: torchpg ok" % (R, N), flush=True)


main()
