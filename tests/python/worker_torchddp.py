"""DistributedDataParallel on msrun's torch backend against the same on
Gloo, in one job: the default group is init_process_group("msrun") with
torch's MASTER_ADDR/MASTER_PORT removed from the environment (msrun's store
is the default rendezvous: env:// would fail), and a Gloo group of every rank
over the same store. A small torch.nn model trains 20 steps on each
backend from the same weights on the same batches; the losses must agree
within 1e-6 relative at every step, with DDP's default bucket, with many
small buckets, with no_sync gradient accumulation, and with a comm hook
that chains on the Work's future. Prints "rank R of N: torchddp ok"."""

import os
from datetime import timedelta

from torch_worker import dist, torch
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 20


def model_of():
    torch.manual_seed(1234)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 4))


def batch(rank, step, micro=0):
    g = torch.Generator().manual_seed(100003 * rank + 101 * step + micro)
    return torch.randn(16, 32, generator=g), torch.randn(16, 4, generator=g)


def hook(state, bucket):
    """An allreduce hook chained on the Work's future (as DDP's own)."""
    t = bucket.buffer().div_(dist.get_world_size(state))
    fut = dist.all_reduce(t, group=state, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


def train(group, rank, mode):
    """The losses of 20 steps of DDP over group."""
    kw = {"bucket_cap_mb": 0.004} if mode == "buckets" else {}
    ddp = DDP(model_of(), process_group=group, **kw)
    if mode == "hook":
        ddp.register_comm_hook(group, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        if mode == "no_sync":
            with ddp.no_sync():  # the first micro-batch's gradients stay local
                x, y = batch(rank, step, 1)
                torch.nn.functional.mse_loss(ddp(x), y).backward()
        x, y = batch(rank, step)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in ddp.parameters()]


def main():
    torch.set_num_threads(1)
    for var in ("MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(var, None)
    dist.init_process_group("msrun", timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    if dist.get_backend() != "msrun":
        raise AssertionError("the default group's backend is %s" % dist.get_backend())
    gloo = dist.new_group(backend="gloo")
    for mode in ("default", "buckets", "no_sync", "hook"):
        ml, mp = train(None, rank, mode)
        gl, gp = train(gloo, rank, mode)
        for step, (a, b) in enumerate(zip(ml, gl)):
            if abs(a - b) > 1e-6 * max(abs(a), abs(b), 1e-30):
                raise AssertionError("rank %d %s step %d: loss %r on msrun, %r on Gloo" % (rank, mode, step, a, b))
        for a, b in zip(mp, gp):
            if not torch.allclose(a, b, rtol=1e-5, atol=1e-7):
                raise AssertionError("rank %d %s: the weights differ after %d steps" % (rank, mode, STEPS))
        # every rank holds the same weights (DDP kept them in step)
        w = mp[0].reshape(-1)[:8].clone()
        ws = [torch.empty_like(w) for _ in range(n)]
        dist.all_gather(ws, w)
        if not all(torch.equal(w, v) for v in ws):
            raise AssertionError("rank %d %s: the ranks' weights differ" % (rank, mode))
        print("rank %d: ddp %s: %d steps, last loss %.6f (msrun) %.6f (Gloo)" % (rank, mode, STEPS, ml[-1], gl[-1]), flush=True)
    dist.destroy_process_group()
    print("rank %d of %d: torchddp ok" % (rank, n), flush=True)


main()
