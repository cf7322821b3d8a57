"""PyTorch's rate on bf16_gemm_bench's products, one thread: prints lines
"name fp32_gflops bf16_gflops" for bf16_gemm_bench --torch.

  bf16_gemm_torch.py [SECONDS]"""
import sys
import time

import torch

SHAPES = [  # name, trans_a, trans_b, M, N, K (bf16_gemm_bench.c's table)
    ("qkv", 0, 1, 1024, 1152, 384), ("proj", 0, 1, 1024, 384, 384),
    ("fc", 0, 1, 1024, 1536, 384), ("fc-proj", 0, 1, 1024, 384, 1536),
    ("head", 0, 1, 1024, 256, 384), ("fc-dinp", 0, 0, 1024, 384, 1536),
    ("fc-dweight", 1, 0, 1536, 384, 1024),
]


def rate(a, b, ta, tb, flops, seconds):
    """GFLOP/s of the fastest torch.matmul(op(a), op(b)) repeated for about
    seconds, timed in the thread's CPU time (as bf16_gemm_bench does)."""
    x = a.t() if ta else a
    y = b.t() if tb else b
    torch.matmul(x, y)
    best, t0 = 1e30, time.thread_time()
    t = t0
    while t - t0 < seconds:
        t1 = time.thread_time()
        torch.matmul(x, y)
        t = time.thread_time()
        best = min(best, t - t1)
    return flops / best / 1e9


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 0.5
    torch.set_num_threads(1)
    for name, ta, tb, m, n, k in SHAPES:
        a = torch.randn((k, m) if ta else (m, k))
        b = torch.randn((n, k) if tb else (k, n))
        flops = 2.0 * m * n * k
        f32 = rate(a, b, ta, tb, flops, seconds)
        bf16 = rate(a.bfloat16(), b.bfloat16(), ta, tb, flops, seconds)
        print(f"{name} {f32:.2f} {bf16:.2f}", flush=True)


if __name__ == "__main__":
    main()
