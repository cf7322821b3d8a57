"""The same Llama in plain PyTorch (fp32), written here from docs/model.md's
"Llama" section and Hugging Face's LlamaForCausalLM (no msrun code), loaded
from train_gpt's --export-safetensors file under Hugging Face's names, run
on train_gpt's --dump-logits batch with the targets --dump-grads used (each
token's next byte of the data file). Checks:

  the logits, within 1e-5 of the largest of train_gpt's (--dump-logits);
  the mean loss, within 1e-5 relative of --dump-grads' "loss";
  the gradient of every tensor, within 1e-4 of that tensor's largest
  (--dump-grads).

The model is torch_models.py's Llama; the file's names and shapes must be
llama_layout's (the PyTorch side of bench/train/llama_bench.sh builds its
model from it).

usage: llama_torch.py MODEL.safetensors LOGITS.bin GRADS.safetensors DATA
                      HEADS KV_HEADS ROPE_THETA
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_torch import read_logits, read_safetensors  # noqa: E402
from torch_models import llama_layout, llama_logits  # noqa: E402


def rel(got, want):
    return (got - want).abs().max().item() / max(want.abs().max().item(), 1e-30)


def main():
    torch.set_num_threads(1)
    model, logits_path, grads_path, data_path = sys.argv[1:5]
    NH, KVH, theta = int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7])
    p = read_safetensors(model)
    inp, want = read_logits(logits_path)
    g = read_safetensors(grads_path)
    data = np.fromfile(data_path, dtype=np.uint8).astype(np.int64)
    B, T = inp.shape
    N = B * T
    assert (inp.flatten().numpy() == data[np.arange(N) % len(data)]).all(), "another batch"
    tgt = torch.from_numpy(data[(np.arange(N) + 1) % len(data)]).view(B, T)
    assert set(g) == set(p) | {"loss"}, sorted(set(g) ^ set(p))
    V, C = p["model.embed_tokens.weight"].shape
    L = 1 + max(int(k.split(".")[2]) for k in p if k.startswith("model.layers."))
    FF = p["model.layers.0.mlp.gate_proj.weight"].shape[0]
    want_shapes = {n: s for n, s, _ in llama_layout(V, C, L, NH, KVH, FF)}
    shapes = {n: tuple(t.shape) for n, t in p.items()}
    if shapes != want_shapes:
        print(f"FAIL: the file's tensors are not llama_layout's: "
              f"{sorted(set(shapes.items()) ^ set(want_shapes.items()))}")
        return 1
    for t in p.values():
        t.requires_grad_(True)
    logits = llama_logits(p, inp, NH, KVH, theta)
    loss = F.cross_entropy(logits.view(N, -1), tgt.view(N))
    loss.backward()
    rc = 0
    err = rel(logits.detach(), want)
    lerr = abs(loss.item() - g["loss"].item()) / abs(g["loss"].item())
    print(f"llama_torch: {len(p)} tensors, logits {tuple(want.shape)}: max difference {err:.3g} "
          f"of the largest; loss {loss.item():.6f} vs {g['loss'].item():.6f} ({lerr:.3g})")
    if not err <= 1e-5 or not lerr <= 1e-5:
        print(f"FAIL: logits differ by {err:.3g} or the loss by {lerr:.3g} (> 1e-5)")
        rc = 1
    worst = (0.0, "")
    for name, t in p.items():
        e = rel(g[name], t.grad)
        worst = max(worst, (e, name))
        if not e <= 1e-4:
            print(f"FAIL: the gradient of {name} differs by {e:.3g} of its largest (> 1e-4)")
            rc = 1
    print(f"llama_torch: gradients of {len(p)} tensors, worst {worst[0]:.3g} ({worst[1]})")
    return rc


if __name__ == "__main__":
    sys.exit(main())
