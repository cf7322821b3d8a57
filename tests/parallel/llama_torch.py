"""The same Llama in plain PyTorch (fp32), written here from docs/model.md's
"Llama" section and Hugging Face's LlamaForCausalLM (no msrun code), loaded
from train_gpt's --export-safetensors file under Hugging Face's names, run
on train_gpt's --dump-logits batch with the targets --dump-grads used (each
token's next byte of the data file). Checks:

  the logits, within 1e-5 of the largest of train_gpt's (--dump-logits);
  the mean loss, within 1e-5 relative of --dump-grads' "loss";
  the gradient of every tensor, within 1e-4 of that tensor's largest
  (--dump-grads).

Rotary positions are Hugging Face's rotate_half pairing (element i with
i + HS/2, angle t * theta^(-2i/HS)), the angles computed in float64 and
rounded to fp32 as train_gpt does; key/value heads repeated as repeat_kv
does (query head h reads key/value head h // (NH / KVH)); RMSNorm with
eps 1e-5.

usage: llama_torch.py MODEL.safetensors LOGITS.bin GRADS.safetensors DATA
                      HEADS KV_HEADS ROPE_THETA
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_torch import read_logits, read_safetensors  # noqa: E402

EPS = 1e-5


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rope(x, theta):
    """x (B, H, T, HS), rotated as Hugging Face's apply_rotary_pos_emb."""
    T, HS = x.shape[2], x.shape[3]
    inv = theta ** (-torch.arange(0, HS, 2, dtype=torch.float64) / HS)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]  # (T, HS/2)
    ang = torch.cat([ang, ang], dim=-1)
    cos, sin = ang.cos().float(), ang.sin().float()
    x1, x2 = x[..., :HS // 2], x[..., HS // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def logits_of(p, inp, NH, KVH, theta):
    V, C = p["model.embed_tokens.weight"].shape
    L = 1 + max(int(k.split(".")[2]) for k in p if k.startswith("model.layers."))
    B, T = inp.shape
    HS = C // NH
    x = p["model.embed_tokens.weight"][inp]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        def w(n):
            return p[f"model.layers.{l}.{n}.weight"]
        h = rms_norm(x, w("input_layernorm"))
        q = (h @ w("self_attn.q_proj").T).view(B, T, NH, HS).transpose(1, 2)
        k = (h @ w("self_attn.k_proj").T).view(B, T, KVH, HS).transpose(1, 2)
        v = (h @ w("self_attn.v_proj").T).view(B, T, KVH, HS).transpose(1, 2)
        q, k = rope(q, theta), rope(k, theta)
        k = k.repeat_interleave(NH // KVH, dim=1)  # repeat_kv
        v = v.repeat_interleave(NH // KVH, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ w("self_attn.o_proj").T
        h = rms_norm(x, w("post_attention_layernorm"))
        g = F.silu(h @ w("mlp.gate_proj").T) * (h @ w("mlp.up_proj").T)
        x = x + g @ w("mlp.down_proj").T
    x = rms_norm(x, p["model.norm.weight"])
    return x @ p["lm_head.weight"].T


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
    for t in p.values():
        t.requires_grad_(True)
    logits = logits_of(p, inp, NH, KVH, theta)
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
