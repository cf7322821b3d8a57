"""torch.distributed's "msrun" backend against Gloo, side by side in one job
(bench/torch/torch_bench.sh runs it under msrun): each collective at sizes
from 8 B to 64 MiB, then the step time of DDP training an MLP of about 21M
parameters with each backend. Both groups share msrun's store (the default
group is Gloo with init_method="msrun://"). Each figure is the slowest rank's
mean per call (per step), timed alternately (msrun, Gloo, msrun, ...) for
ROUNDS rounds, the median round (DDP's Gloo / msrun: the median of the
rounds' ratios, and their range). Rank 0 prints markdown tables."""

import os
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import msrun.torch  # noqa: F401  (registers the backend)

ROUNDS = int(os.environ.get("ROUNDS", "3"))
TARGET_S = float(os.environ.get("TARGET_S", "0.1"))
DDP_STEPS = int(os.environ.get("DDP_STEPS", "5"))


def parse_size(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20}.get(s[-1:], 1)
    return int(s.rstrip("KMB") or 0) * mult


SIZES = [parse_size(s) for s in os.environ.get("SIZES", "8,1K,64K,1M,4M,16M,64M").split(",")]
COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all")
OPS = [o.strip() for o in os.environ.get("OPS", ",".join(COLLECTIVES)).split(",") if o.strip()]
for o in OPS:
    if o not in COLLECTIVES:
        sys.exit("torch_bench.py: OPS names %r; the collectives are %s" % (o, ", ".join(COLLECTIVES)))


def human(n):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return "%d %s" % (n // div, unit)
    return "%d B" % n


def calls(name, group, n, count):
    """A function running collective name once on group, count floats."""
    x = torch.ones(count)
    out = torch.empty(count * n)
    outs = list(out.chunk(n)) if count else [torch.empty(0) for _ in range(n)]
    rs_in = torch.ones(count * n)
    if name == "all_reduce":
        return lambda: dist.all_reduce(x, group=group)
    if name == "broadcast":
        return lambda: dist.broadcast(x, 0, group=group)
    if name == "reduce":
        return lambda: dist.reduce(x, 0, group=group)
    if name == "all_gather":
        return lambda: dist.all_gather(outs, x, group=group)
    if name == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(x, rs_in, group=group)
    if name == "all_to_all":
        y = torch.empty(count)
        return lambda: dist.all_to_all_single(y, x, group=group)
    raise ValueError(name)


def timed(fn, group, iters):
    dist.barrier(group=group)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    dt = torch.tensor([(time.perf_counter() - t0) / iters])
    dist.all_reduce(dt, op=dist.ReduceOp.MAX, group=group)
    return dt.item()


def timed_cpu(fn, group, iters):
    """timed's wall seconds per call, and each rank's process CPU seconds
    per call (every thread: the backend's too), averaged over the ranks."""
    dist.barrier(group=group)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(iters):
        fn()
    c = torch.tensor([(time.process_time() - c0) / iters], dtype=torch.float64)
    dt = torch.tensor([(time.perf_counter() - t0) / iters])
    dist.all_reduce(dt, op=dist.ReduceOp.MAX, group=group)
    dist.all_reduce(c, group=group)
    return dt.item(), c.item() / dist.get_world_size(group)


def iters_for(fn, group):
    """Calls per timed batch: about TARGET_S seconds (the slowest rank's)."""
    one = timed(fn, group, 1)
    one = timed(fn, group, 1)
    return max(1, min(10000, int(TARGET_S / max(one, 1e-6))))


def compare(fns):
    """The median over ROUNDS of each of fns' (name -> (fn, group)) mean."""
    iters = {k: iters_for(fn, g) for k, (fn, g) in fns.items()}
    times = {k: [] for k in fns}
    for _ in range(ROUNDS):
        for k, (fn, g) in fns.items():
            times[k].append(timed(fn, g, iters[k]))
    return {k: statistics.median(v) for k, v in times.items()}


def bench_collectives(pg_msrun, n, rank):
    gloo_has = {"reduce_scatter": False}
    if rank == 0:
        print("### np=%d: collectives, float32, us per call (the slowest rank's)\n" % n)
        print("| collective | size | msrun us | Gloo us | Gloo / msrun |")
        print("|---|---:|---:|---:|---:|")
    for name in OPS:
        for size in SIZES:
            count = max(n, size // 4)
            count -= count % n
            fns = {"msrun": (calls(name, pg_msrun, n, count), pg_msrun)}
            if gloo_has.get(name, True):
                fns["gloo"] = (calls(name, None, n, count), None)
            t = compare(fns)
            if rank == 0:
                g = t.get("gloo")
                print("| %s | %s | %.1f | %s | %s |" % (
                    name, human(count * 4), t["msrun"] * 1e6, "%.1f" % (g * 1e6) if g else "(none)",
                    "%.1fx" % (g / t["msrun"]) if g else "-"), flush=True)


def mlp():
    torch.manual_seed(0)
    layers = []
    for _ in range(5):
        layers += [torch.nn.Linear(2048, 2048), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(2048, 10))


def no_comm(state, bucket):
    """A DDP comm hook that sends nothing: the bucket's gradients as they are."""
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def ddp_step(group, hook=None):
    """One training step of DDP over group (None: the default, Gloo); with
    hook, DDP's communication hook (no_comm: a step with no communication)."""
    ddp = DDP(mlp(), process_group=group if group is not None else dist.group.WORLD)
    if hook is not None:
        ddp.register_comm_hook(None, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x, y = torch.randn(32, 2048), torch.randint(0, 10, (32,))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    return step


def bench_ddp(pg_msrun, n, rank):
    """The models built and warmed first, then each round times msrun's
    DDP_STEPS steps, Gloo's, and those of DDP with no communication (its
    buckets filled and handed back unreduced: the floor a backend's step
    cannot go under), so that a change of load hits all three."""
    params = sum(p.numel() for p in mlp().parameters())
    steps = {"msrun": ddp_step(pg_msrun), "gloo": ddp_step(None),
             "none": ddp_step(pg_msrun, no_comm)}
    for step in steps.values():
        step()
        step()
    res = {k: [] for k in steps}
    cpu = {k: [] for k in steps}
    for _ in range(ROUNDS):
        for label, step in steps.items():
            wall, c = timed_cpu(step, pg_msrun, DDP_STEPS)
            res[label].append(wall)
            cpu[label].append(c)
    if rank == 0:
        m, g = statistics.median(res["msrun"]), statistics.median(res["gloo"])
        ratios = [gt / mt for mt, gt in zip(res["msrun"], res["gloo"])]
        print("\n### np=%d: DDP step, MLP of %.1fM parameters, batch 32 per rank\n" % (n, params / 1e6))
        cm = {k: statistics.median(v) * 1e3 for k, v in cpu.items()}
        print("| backend | ms per step (median) | rounds' range | Gloo / this row "
              "| CPU ms per step, a rank's (median) |")
        print("|---|---:|---:|---:|---:|")
        print("| msrun | %.1f | %.1f-%.1f | %.2fx (rounds %.2f-%.2f) | %.1f |" % (
            m * 1e3, min(res["msrun"]) * 1e3, max(res["msrun"]) * 1e3, statistics.median(ratios),
            min(ratios), max(ratios), cm["msrun"]))
        print("| Gloo | %.1f | %.1f-%.1f | 1.00x | %.1f |" % (
            g * 1e3, min(res["gloo"]) * 1e3, max(res["gloo"]) * 1e3, cm["gloo"]))
        z = statistics.median(res["none"])
        floor = [gt / zt for zt, gt in zip(res["none"], res["gloo"])]
        print("| no communication (the floor) | %.1f | %.1f-%.1f | %.2fx (rounds %.2f-%.2f) | %.1f |" % (
            z * 1e3, min(res["none"]) * 1e3, max(res["none"]) * 1e3, statistics.median(floor),
            min(floor), max(floor), cm["none"]), flush=True)


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="msrun://", timeout=timedelta(minutes=10))
    rank, n = dist.get_rank(), dist.get_world_size()
    pg = dist.new_group(backend="msrun")
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    if what in ("all", "collectives"):
        bench_collectives(pg, n, rank)
    if what in ("all", "ddp"):
        bench_ddp(pg, n, rank)
    dist.destroy_process_group()


main()
