"""Repeats gpt_torch_dump's training in PyTorch and compares.

The same tiny GPT (parameters loaded from the C model's flat buffer, in the
layout of model/gpt.h), the same batches, torch.optim.AdamW with the same
decay groups and clip_grad_norm_. Checks, in fp32: every step's loss and
gradient norm within 1e-5 relative, the first step's gradient of every
tensor within 1e-5 of that tensor's largest, and the final parameters within
1e-5 relative (norm; the key bias, whose
gradient is zero but for rounding, left out). Exits 1 on a mismatch, printing the worst numbers.

A Mixture-of-Experts dump ("MSRGPTM1") adds the MoE blocks. The model,
MoE blocks included, is torch_models.py's GPT.

usage: torch_check.py DUMP
"""
import math
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import DROPPED, gpt_layout, gpt_loss  # noqa: E402

TOL = 1e-5


def read_dump(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] not in (b"MSRGPTD1", b"MSRGPTM1"):
        sys.exit(f"{path}: not a gpt_torch_dump file")
    moe = data[:8] == b"MSRGPTM1"
    off = 8
    V, maxT, L, NH, C, micro, accum, steps = struct.unpack_from("8i", data, off)
    off += 32
    (P,) = struct.unpack_from("Q", data, off)
    off += 8
    lr, wd, b1, b2, eps, clip = struct.unpack_from("6d", data, off)
    off += 48
    E = K = every = 0
    F_cap = A = 0.0
    PE = 0
    if moe:
        E, K, every = struct.unpack_from("3i", data, off)
        off += 12
        F_cap, A = struct.unpack_from("2d", data, off)
        off += 16
        (PE,) = struct.unpack_from("Q", data, off)
        off += 8

    def floats(n):
        nonlocal off
        if n == 0:
            return torch.zeros(0)
        t = torch.frombuffer(bytearray(data[off:off + 4 * n]), dtype=torch.float32)
        off += 4 * n
        return t

    def ints(n):
        nonlocal off
        t = torch.frombuffer(bytearray(data[off:off + 4 * n]), dtype=torch.int32).long()
        off += 4 * n
        return t

    params0 = torch.cat([floats(P), floats(PE)])
    G, T = micro * accum, maxT
    batches = []
    for _ in range(steps):
        inp, tgt = ints(G * T).view(G, T), ints(G * T).view(G, T)
        loss, norm = struct.unpack_from("2d", data, off)
        off += 16
        batches.append((inp, tgt, loss, norm))
    grads1 = torch.cat([floats(P), floats(PE)])
    params_end = torch.cat([floats(P), floats(PE)])
    if off != len(data):
        sys.exit(f"{path}: {len(data) - off} bytes left over")
    cfg = dict(V=V, maxT=maxT, L=L, NH=NH, C=C, lr=lr, wd=wd, b1=b1, b2=b2, eps=eps, clip=clip,
               E=E, K=K, every=every, F=F_cap, A=A, micro=micro)
    return cfg, params0, batches, grads1, params_end


def unflatten(cfg, flat):
    params, off = {}, 0
    for name, shape, _ in gpt_layout(cfg):
        n = math.prod(shape)
        params[name] = flat[off:off + n].view(shape).clone()
        off += n
    assert off == flat.numel(), (off, flat.numel())
    return params


def main():
    torch.set_num_threads(1)
    cfg, params0, batches, grads1, params_end = read_dump(sys.argv[1])
    p = unflatten(cfg, params0)
    for t in p.values():
        t.requires_grad_(True)
    lay = gpt_layout(cfg)
    decay = [p[n] for n, _, d in lay if d]
    no_decay = [p[n] for n, _, d in lay if not d]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["wd"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg["lr"], betas=(cfg["b1"], cfg["b2"]), eps=cfg["eps"])
    failures = []
    c_grads1 = unflatten(cfg, grads1)
    for s, (inp, tgt, c_loss, c_norm) in enumerate(batches):
        opt.zero_grad()
        loss = gpt_loss(cfg, p, inp, tgt)
        loss.backward()
        if s == 0:  # before clipping: the C trainer clips inside the update
            worst = 0.0
            for name, _, _ in lay:
                g = p[name].grad
                scale = g.abs().max().item()
                err = (g - c_grads1[name]).abs().max().item() / max(scale, 1e-30)
                worst = max(worst, err)
                if err > TOL:
                    failures.append(f"step 1: gradient of {name} differs by {err:.2e} of its "
                                    f"largest element {scale:.3e}")
            print(f"step 1 gradients: worst tensor differs by {worst:.1e} of its largest element")
        norm = torch.nn.utils.clip_grad_norm_([p[n] for n, _, _ in lay], cfg["clip"]).item()
        rel = abs(loss.item() - c_loss) / abs(loss.item())
        reln = abs(norm - c_norm) / norm
        print(f"step {s + 1}: loss torch {loss.item():.7f} C {c_loss:.7f} (rel {rel:.1e}), "
              f"grad norm torch {norm:.6f} C {c_norm:.6f} (rel {reln:.1e})")
        if rel > TOL or reln > TOL:
            failures.append(f"step {s + 1}: loss or gradient norm differs")
        opt.step()
    if cfg["E"] > 0:
        print(f"MoE: {DROPPED[0]} choices dropped for capacity in {len(batches)} steps")
        if DROPPED[0] == 0:
            failures.append("no choice was dropped: the capacity is not exercised")
    # The key bias (columns [C, 2C) of qkvb) has a true gradient of exactly
    # zero: softmax ignores a score shift shared by a query's whole row. Its
    # computed gradient is rounding noise, which Adam scales up to full-size
    # steps, so it is left out of the comparison of the final parameters.
    C = cfg["C"]
    c_end = unflatten(cfg, params_end)
    mine, theirs = [], []
    for n, _, _ in lay:
        a, b = p[n].detach().reshape(-1), c_end[n].reshape(-1)
        if n.endswith(".qkvb"):
            a, b = torch.cat([a[:C], a[2 * C:]]), torch.cat([b[:C], b[2 * C:]])
        mine.append(a)
        theirs.append(b)
    flat, params_end = torch.cat(mine), torch.cat(theirs)
    relp = ((flat - params_end).norm() / flat.norm()).item()
    print(f"parameters after {len(batches)} steps differ by {relp:.1e} (relative norm, "
          f"key biases left out)")
    if relp > TOL:
        failures.append("final parameters differ")
    if failures:
        print("MISMATCH:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("torch agrees")


if __name__ == "__main__":
    main()
