"""msrun's allreduce from Python on PyTorch CPU tensors, against
torch.distributed's Gloo allreduce of the same tensors in the same job
(Gloo's store at MASTER_ADDR:MASTER_PORT, which msrun sets). Floats agree
within rounding (the two sum in different orders), integers exactly;
msrun's result is the same bits on every rank. Each rank prints
"rank R of N: torch ok"."""

import hashlib
import os
import sys

try:
    import numpy as np  # noqa: F401  (torch's .numpy() needs it)
    import torch
    import torch.distributed as dist
except ImportError as e:
    print("SKIP: torch or numpy cannot be imported (Debian: python3-torch, python3-numpy): %s" % e)
    sys.exit(77)

import msrun


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def bf16_of(rank, count):
    """Rank's bfloat16 input: the same on every rank that asks."""
    g = torch.Generator().manual_seed(99 + rank)
    return (torch.randn(count, generator=g) * 4).to(torch.bfloat16)


def check_bf16_tensors(ctx):
    """torch.bfloat16 tensors passed as they are (no .numpy(): NumPy has no
    bfloat16) to every collective, against float64 references: sum within
    what rounding to bf16 once per step allows (n steps of 2^-8 of the
    magnitudes), min and max exact."""
    r, n = ctx.rank, ctx.world_size
    count = 1000
    ins = [bf16_of(q, count).double() for q in range(n)]
    ref_sum = sum(ins)
    bound = n * 2.0 ** -8 * sum(x.abs() for x in ins) + 1e-30
    t = bf16_of(r, count)
    ctx.allreduce(t)
    expect(t.dtype == torch.bfloat16, "the tensor stays bfloat16")
    err = (t.double() - ref_sum).abs()
    expect(bool((err <= bound).all()), "bf16 sum: worst error %g over bound" % (err - bound).max().item())
    for op, ref in (("max", torch.stack(ins).max(0).values), ("min", torch.stack(ins).min(0).values)):
        t = bf16_of(r, count)
        out = torch.empty_like(t)
        ctx.allreduce(t, out, op=op)
        expect(torch.equal(out.double(), ref), "bf16 %s: differs from the reference" % op)
    # the other collectives take the tensor too
    b = bf16_of(r, 16)
    ctx.world.broadcast(b, root=0)
    expect(torch.equal(b, bf16_of(0, 16)), "bf16 broadcast")
    g = torch.empty(16 * n, dtype=torch.bfloat16)
    ctx.world.allgather(bf16_of(r, 16), g)
    expect(torch.equal(g, torch.cat([bf16_of(q, 16) for q in range(n)])), "bf16 allgather")
    rs = torch.empty(4, dtype=torch.bfloat16)
    ctx.world.reduce_scatter(torch.full((4 * n,), 1.5, dtype=torch.bfloat16), rs)
    expect(bool((rs == 1.5 * n).all()), "bf16 reduce_scatter: %r" % rs)
    # a float32 sendbuf with a bfloat16 recvbuf: refused, not reinterpreted
    try:
        ctx.allreduce(torch.zeros(4), torch.zeros(4, dtype=torch.bfloat16))
    except TypeError as e:
        expect("dtype" in str(e), str(e))
    else:
        raise AssertionError("float32 into bfloat16 was accepted")


def main():
    torch.set_num_threads(1)
    ctx = msrun.init()
    r, n = ctx.rank, ctx.world_size
    if not dist.is_available() or not dist.is_gloo_available():
        print("SKIP: this torch has no Gloo backend")
        sys.exit(77)
    # one host: Gloo on loopback, whatever the host name resolves to
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method="env://", rank=r, world_size=n)
    gen = torch.Generator().manual_seed(1234 + r)
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int64):
        for count in (1, 1000, 300000):
            if dtype.is_floating_point:
                t = torch.randn(count, generator=gen, dtype=dtype)
            else:
                t = torch.randint(-1000, 1000, (count,), generator=gen, dtype=dtype)
            by_gloo = t.clone()
            dist.all_reduce(by_gloo)
            by_msrun = t.clone()
            out = ctx.allreduce(by_msrun.numpy())  # in place, through .numpy()
            expect(np.shares_memory(out, by_msrun.numpy()), "allreduce returns the tensor's array")
            what = "%s x %d" % (dtype, count)
            if dtype.is_floating_point:
                tol = 1e-5 if dtype == torch.float32 else 1e-12
                expect(torch.allclose(by_msrun, by_gloo, rtol=tol, atol=tol * n),
                       "%s: max difference %g" % (what, (by_msrun - by_gloo).abs().max().item()))
            else:
                expect(torch.equal(by_msrun, by_gloo), "%s: differs from Gloo" % what)
            # msrun's reduction order is fixed: the same bits everywhere
            digest = hashlib.sha256(by_msrun.numpy().tobytes()).digest()
            expect(len(set(ctx.allgather(digest))) == 1, "%s: ranks disagree" % what)
    # the tensor itself (through its .numpy()), a 2-D one, out of place
    t = torch.full((4, 6), float(r + 1))
    ctx.allreduce(t)
    expect(torch.all(t == n * (n + 1) / 2).item(), "a tensor passed as itself")
    src = torch.arange(12, dtype=torch.float64).reshape(3, 4) * (r + 1)
    dst = torch.empty_like(src)
    ctx.allreduce(src, dst, op="max")
    expect(torch.equal(dst, torch.arange(12, dtype=torch.float64).reshape(3, 4) * n), "max out of place")
    # a transposed tensor is not contiguous: refused, not summed in the wrong order
    try:
        ctx.allreduce(torch.zeros(4, 3).t())
    except ValueError as e:
        expect("contiguous" in str(e), str(e))
    else:
        raise AssertionError("a transposed tensor was accepted")
    # bfloat16 through its bits
    b = torch.full((8,), 1.5, dtype=torch.bfloat16)
    ctx.allreduce(b.view(torch.int16).numpy(), dtype="bf16")
    expect(torch.all(b == 1.5 * n).item(), "bf16: %r" % b)
    check_bf16_tensors(ctx)
    dist.barrier()
    dist.destroy_process_group()
    ctx.barrier()
    print("rank %d of %d: torch ok" % (r, n), flush=True)
    ctx.finalize()


if __name__ == "__main__":
    main()
