"""Loads train_gpt's --export-safetensors file into a plain PyTorch GPT and
compares its logits on train_gpt's --dump-logits batch.

The reader is written here from the safetensors specification alone (u64
little-endian header length N, N bytes of JSON mapping each name to dtype,
shape and data_offsets [begin, end) in the data section after it, an
optional "__metadata__"; raw little-endian row-major data), no msrun code.
The model is the GPT of model/gpt.h as docs/checkpoint.md's "safetensors
names" describe its tensors: torch_models.py's GPT, the batch one
micro-batch for a Mixture-of-Experts model.
Checks every logit within 1e-5 of train_gpt's, relative to the largest.

usage: safetensors_torch.py MODEL.safetensors LOGITS.bin HEADS [E K EVERY F]
                            [-- MODEL.safetensors LOGITS.bin HEADS ...]...
(one process for several checks: importing torch is the slow part)
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import gpt_logits  # noqa: E402

TOL = 1e-5
DTYPES = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "F16": np.dtype("<f2")}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    assert 8 + n <= len(blob), "header length past the file"
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    header.pop("__metadata__", None)
    spans, out = [], {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        dt = DTYPES[t["dtype"]]
        shape = tuple(t["shape"])
        assert end - begin == dt.itemsize * math.prod(shape), name
        spans.append((begin, end))
        arr = np.frombuffer(data[begin:end], dtype=dt).reshape(shape)
        out[name] = torch.from_numpy(arr.astype(np.float32))
    spans.sort()
    at = 0
    for begin, end in spans:  # the data tiled exactly
        assert begin == at, (begin, at)
        at = end
    assert at == len(data), (at, len(data))
    return out


def read_logits(path):
    with open(path, "rb") as f:
        blob = f.read()
    B, T, V = struct.unpack("<3i", blob[:12])
    tok = np.frombuffer(blob[12:12 + 4 * B * T], dtype="<i4").reshape(B, T)
    lg = np.frombuffer(blob[12 + 4 * B * T:], dtype="<f4").reshape(B, T, V)
    return torch.from_numpy(tok.astype(np.int64)), torch.from_numpy(lg.copy())


def logits_of(p, inp, NH, moe):
    """The GPT (model/gpt.h, torch_models.py's gpt_logits) of the tensors p on
    inp as one micro-batch; moe: the MoE settings (E 0: dense)."""
    V, C = p["wte"].shape
    L = 1 + max(int(k[1:k.index(".")]) for k in p if k.startswith("h"))
    return gpt_logits(dict(moe, V=V, C=C, L=L, NH=NH, micro=inp.shape[0]), p, inp)[0]


def check(args):
    p = read_safetensors(args[0])
    inp, want = read_logits(args[1])
    moe = {"E": 0, "every": 1, "K": 1, "F": 1.0, "A": 0.0}
    if len(args) > 3:
        moe.update(E=int(args[3]), K=int(args[4]), every=int(args[5]), F=float(args[6]))
    with torch.no_grad():
        got = logits_of(p, inp, int(args[2]), moe)
    err = (got - want).abs().max().item() / max(want.abs().max().item(), 1e-30)
    print(f"safetensors_torch: {args[0]}: {len(p)} tensors, logits {tuple(want.shape)}, "
          f"max difference {err:.3g} of the largest logit")
    if not err <= TOL:
        print(f"FAIL: logits differ by {err:.3g} > {TOL}")
        return 1
    return 0


def main():
    torch.set_num_threads(1)
    rc, group = 0, []
    for a in sys.argv[1:] + ["--"]:
        if a != "--":
            group.append(a)
            continue
        rc |= check(group)
        group = []
    return rc


if __name__ == "__main__":
    sys.exit(main())
