"""Training speed of the GPT of model/gpt.h in PyTorch, one thread: fp32
and under torch.autocast("cpu", dtype=torch.bfloat16), the forward reused
from tests/parallel/safetensors_torch.py. AdamW on random bytes (vocabulary
256), weights initialised as model/gpt.c does in spirit (normal, std
0.02). Prints one line per precision: "torch_MODE TOKENS_PER_CPU_SECOND",
the tokens of STEPS steps (after WARMUP untimed ones) over the thread's CPU
time (time.thread_time), so that other work on the core does not count.

usage: bf16_speed_torch.py LAYERS CHANNELS HEADS SEQ MICRO STEPS WARMUP MODE...
(MODE fp32 or bf16, each run in the order given)
"""
import os
import sys
import time

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "tests", "parallel"))
from safetensors_torch import logits_of  # noqa: E402

V = 256


def params(L, C, T):
    g = torch.Generator().manual_seed(1337)

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).requires_grad_()

    def ones(n):
        return torch.ones(n).requires_grad_()

    def zeros(n):
        return torch.zeros(n).requires_grad_()

    p = {"wte": w(V, C), "wpe": w(T, C), "lnfw": ones(C), "lnfb": zeros(C)}
    for l in range(L):
        p.update({f"h{l}.ln1w": ones(C), f"h{l}.ln1b": zeros(C), f"h{l}.qkvw": w(3 * C, C),
                  f"h{l}.qkvb": zeros(3 * C), f"h{l}.attprojw": w(C, C),
                  f"h{l}.attprojb": zeros(C), f"h{l}.ln2w": ones(C), f"h{l}.ln2b": zeros(C),
                  f"h{l}.fcw": w(4 * C, C), f"h{l}.fcb": zeros(4 * C),
                  f"h{l}.fcprojw": w(C, 4 * C), f"h{l}.fcprojb": zeros(C)})
    return p


def run(L, C, NH, T, B, steps, warmup, mode):
    p = params(L, C, T)
    opt = torch.optim.AdamW(p.values(), lr=3e-4, weight_decay=0.0)
    moe = {"E": 0, "every": 1, "K": 1, "F": 1.0, "A": 0.0}
    g = torch.Generator().manual_seed(7)
    t0 = 0.0
    for s in range(warmup + steps):
        if s == warmup:
            t0 = time.thread_time()
        tok = torch.randint(0, V, (B, T + 1), generator=g)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "bf16"):
            logits = logits_of(p, tok[:, :T], NH, moe)
        loss = F.cross_entropy(logits.float().reshape(-1, V), tok[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return steps * B * T / (time.thread_time() - t0)


def main():
    if len(sys.argv) < 9:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    L, C, NH, T, B, steps, warmup = (int(a) for a in sys.argv[1:8])
    torch.set_num_threads(1)
    for mode in sys.argv[8:]:
        if mode not in ("fp32", "bf16"):
            print(f"bf16_speed_torch: mode {mode!r}: not fp32 or bf16", file=sys.stderr)
            return 2
        print(f"torch_{mode} {run(L, C, NH, T, B, steps, warmup, mode):.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
