"""Allreduce from Python, side by side: msrun's communicator through the
Python package (python/msrun) on a NumPy float32 array, and
torch.distributed over Gloo on a torch CPU tensor of the same size, in the
same job, in place. For each size the two run alternately ROUNDS times (the
machine is shared and noisy: only figures taken together compare), each
round timing ITERS calls of one after ITERS of the other; a round's time is
the slowest rank's mean per call, and the table gives the median round.

Run under msrun (bench/python/allreduce_bench.sh does):
    msrun --worker_num=N --python /usr/bin/python3 bench/python/allreduce_bench.py [SIZES]
SIZES: comma-separated byte counts with K/M suffixes (default 4K..64M).
Rank 0 prints a markdown table: per size the latency of each in
microseconds, msrun's bus bandwidth (nccl-tests' allreduce factor
2(n-1)/n) and Gloo's time over msrun's (above 1: msrun is faster)."""

import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

import msrun

ROUNDS = int(os.environ.get("ROUNDS", "3"))
TARGET_S = float(os.environ.get("TARGET_S", "0.3"))  # time per timed batch


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().rstrip("B").rstrip("I")
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def human(b):
    for unit, m in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= m and b % m == 0:
            return "%d %s" % (b // m, unit)
    return "%d B" % b


def main():
    torch.set_num_threads(1)
    sizes = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
    if len(sys.argv) > 1:
        sizes = [parse_size(s) for s in sys.argv[1].split(",")]
    ctx = msrun.init()
    n, rank = ctx.world_size, ctx.rank
    # local ranks: Gloo on loopback, whatever the host name resolves to
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=n)
    comm = ctx.comm_world()
    slowest = np.zeros(1, np.float64)

    def agree_max(x):
        slowest[0] = x
        comm.allreduce(slowest, op="max")
        return float(slowest[0])

    def timed(fn, iters):
        comm.barrier()
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        return agree_max((time.perf_counter() - t) / iters)

    rows = []
    for size in sizes:
        count = size // 4
        arr = np.zeros(count, np.float32)
        ten = torch.zeros(count, dtype=torch.float32)
        run_msrun = lambda: comm.allreduce(arr)  # noqa: E731
        run_gloo = lambda: dist.all_reduce(ten)  # noqa: E731
        # warm-up (first touches, connections, buffers: a few calls each),
        # and the iteration count every rank uses
        timed(run_msrun, 3)
        timed(run_gloo, 3)
        one = max(timed(run_msrun, 3), timed(run_gloo, 3), 1e-6)
        iters = int(agree_max(max(2, min(1000, TARGET_S / one))))
        t_m, t_g = [], []
        for _ in range(ROUNDS):
            t_m.append(timed(run_msrun, iters))
            t_g.append(timed(run_gloo, iters))
        m, g = statistics.median(t_m), statistics.median(t_g)
        busbw = size * 2 * (n - 1) / n / m / 1e9 if n > 1 else 0.0
        busbw_g = size * 2 * (n - 1) / n / g / 1e9 if n > 1 else 0.0
        rows.append((size, m, g, busbw, busbw_g, iters))
    if rank == 0:
        print("allreduce float32 in place, np=%d, median of %d alternating rounds" % (n, ROUNDS))
        print()
        print("| size | msrun (Python) us | Gloo us | msrun busbw GB/s | Gloo busbw GB/s | Gloo / msrun |")
        print("|---:|---:|---:|---:|---:|---:|")
        for size, m, g, bw, bwg, _ in rows:
            print("| %s | %.1f | %.1f | %.2f | %.2f | %.1fx |"
                  % (human(size), m * 1e6, g * 1e6, bw, bwg, g / m))
        sys.stdout.flush()
    dist.destroy_process_group()
    comm.destroy()
    ctx.finalize()


if __name__ == "__main__":
    main()
