"""Times training steps of the GPT or the Llama of tests/parallel/torch_models.py
(the models the checks compare with train_gpt) in plain PyTorch, fp32, for
bench/train/llama_bench.sh: the shapes and the step of train_gpt (windows of
seq + 1 bytes of a 1 MiB random corpus drawn with replacement, the mean
cross-entropy, clip_grad_norm_ to --grad-clip, torch.optim.AdamW with
betas 0.9, 0.95, eps 1e-8 and the weight decay on the matrices only; a
constant learning rate). The weights are drawn at random (normal, std
0.02; norms' weights 1, biases 0): a step's time does not depend on them.

Prints 'torch: model of N parameters' to stderr, then 'step N loss L ms M'
per step to stdout, M the step's wall time (drawing the batch, zero_grad,
forward, backward, clipping and the update) in milliseconds.

usage: torch_train_bench.py --arch gpt|llama [--layers N] [--channels N]
       [--heads N] [--kv-heads N] [--ffn N] [--seq N] [--micro-batch N]
       [--steps N] [--rope-theta X] [--lr X] [--weight-decay X]
       [--grad-clip X] [--seed N]
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "tests", "parallel"))
from torch_models import gpt_layout, gpt_loss, llama_layout, llama_logits  # noqa: E402

V = 256  # bytes


def positive(s):
    v = int(s)
    if v < 1:
        raise argparse.ArgumentTypeError(f"{s}: not a positive integer")
    return v


def parse():
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("--arch", choices=("gpt", "llama"), required=True)
    a.add_argument("--layers", type=positive, default=4)
    a.add_argument("--channels", type=positive, default=128)
    a.add_argument("--heads", type=positive, default=4)
    a.add_argument("--kv-heads", type=positive, default=None)
    a.add_argument("--ffn", type=positive, default=None)
    a.add_argument("--seq", type=positive, default=64)
    a.add_argument("--micro-batch", type=positive, default=8)
    a.add_argument("--steps", type=positive, default=20)
    a.add_argument("--rope-theta", type=float, default=10000.0)
    a.add_argument("--lr", type=float, default=1e-3)
    a.add_argument("--weight-decay", type=float, default=0.1)
    a.add_argument("--grad-clip", type=float, default=1.0)
    a.add_argument("--seed", type=int, default=1337)
    o = a.parse_args()
    if o.kv_heads is None:
        o.kv_heads = o.heads
    if o.ffn is None:  # train_gpt's default: 8 C / 3 rounded up to a multiple of 8
        o.ffn = (8 * o.channels + 23) // 24 * 8
    if o.channels % o.heads or o.heads % o.kv_heads:
        a.error("--heads must divide --channels, and --kv-heads --heads")
    return o


def model(o):
    """(layout, params, loss function of (inp, tgt))."""
    if o.arch == "gpt":
        cfg = dict(V=V, maxT=o.seq, L=o.layers, NH=o.heads, C=o.channels, E=0, micro=o.micro_batch)
        lay = gpt_layout(cfg)
    else:
        lay = llama_layout(V, o.channels, o.layers, o.heads, o.kv_heads, o.ffn)
    p = {}
    for name, shape, _ in lay:
        if len(shape) == 2:
            p[name] = torch.randn(shape) * 0.02
        elif name.endswith("b"):  # the GPT's biases (its vectors are ...w or ...b)
            p[name] = torch.zeros(shape)
        else:
            p[name] = torch.ones(shape)
        p[name].requires_grad_(True)
    if o.arch == "gpt":
        return lay, p, lambda inp, tgt: gpt_loss(cfg, p, inp, tgt)

    def llama_loss(inp, tgt):
        logits = llama_logits(p, inp, o.heads, o.kv_heads, o.rope_theta)
        return F.cross_entropy(logits.view(-1, V), tgt.reshape(-1))
    return lay, p, llama_loss


def main():
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    o = parse()
    torch.manual_seed(o.seed)
    lay, p, loss_of = model(o)
    n = sum(math.prod(s) for _, s, _ in lay)
    print(f"torch: model of {n} parameters ({o.arch}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread)", file=sys.stderr)
    decay = [p[name] for name, _, d in lay if d]
    no_decay = [p[name] for name, _, d in lay if not d]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o.lr, betas=(0.9, 0.95), eps=1e-8)
    corpus = torch.randint(0, V, (1 << 20,))
    B, T = o.micro_batch, o.seq
    offs = torch.arange(T + 1)
    for step in range(1, o.steps + 1):
        t0 = time.perf_counter()
        win = corpus[torch.randint(0, corpus.numel() - T - 1, (B, 1)) + offs]
        opt.zero_grad(set_to_none=True)
        loss = loss_of(win[:, :-1], win[:, 1:])
        loss.backward()
        if o.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(p.values(), o.grad_clip)
        opt.step()
        value = loss.item()
        ms = (time.perf_counter() - t0) * 1e3
        print(f"step {step} loss {value:.6f} ms {ms:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
