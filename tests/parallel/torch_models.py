"""The models of docs/model.md written in plain PyTorch (fp32, no msrun
code), shared by the checks against train_gpt (torch_check.py,
safetensors_torch.py, llama_torch.py) and by bench/train/llama_bench.sh's
PyTorch side (bench/train/torch_train_bench.py), so that the bench times the
model the tests compare.

The GPT (model/gpt.h): its parameters as gpt_layout names them (the C model's
flat-buffer order), gpt_logits its logits, gpt_loss the mean loss of a batch,
with Mixture-of-Experts blocks written from docs/model.md: softmax router,
each token's top K (ties: the lower index), gate = the probability, capacity
ceil(F * N * K / E) per micro-batch with slots handed out choice rank first,
then token index, dropped choices adding nothing, and the load-balancing loss
A * E * sum f_e * P_e of each micro-batch, averaged over the step's
micro-batches.

The Llama (docs/model.md "Llama", Hugging Face's LlamaForCausalLM): its
parameters as llama_layout names them (Hugging Face's names, those of
train_gpt's --export-safetensors), llama_logits its logits. Rotary positions
are Hugging Face's rotate_half pairing (element i with i + HS/2, angle
t * theta^(-2i/HS)), the angles computed in float64 and rounded to fp32 as
train_gpt does; key/value heads repeated as repeat_kv does (query head h
reads key/value head h // (NH / KVH)); RMSNorm with eps 1e-5.
"""
import math

import torch
import torch.nn.functional as F

DROPPED = [0]  # choices dropped for capacity, counted by moe_mlp
EPS = 1e-5  # RMSNorm's


def is_moe(cfg, l):
    return cfg["E"] > 0 and (l + 1) % cfg["every"] == 0


def gpt_layout(cfg):
    """(name, shape, decay) in flat-buffer order, as model/gpt.h lays it out, then the
    experts in the whole model's expert numbering (model/moe.h)."""
    V, maxT, L, C, E = cfg["V"], cfg["maxT"], cfg["L"], cfg["C"], cfg["E"]
    out = [("wte", (V, C), True), ("wpe", (maxT, C), True)]
    mlp = [("fcw", (4 * C, C), True), ("fcb", (4 * C,), False),
           ("fcprojw", (C, 4 * C), True), ("fcprojb", (C,), False)]
    for l in range(L):
        for name, shape, decay in [("ln1w", (C,), False), ("ln1b", (C,), False),
                                   ("qkvw", (3 * C, C), True), ("qkvb", (3 * C,), False),
                                   ("attprojw", (C, C), True), ("attprojb", (C,), False),
                                   ("ln2w", (C,), False), ("ln2b", (C,), False)]:
            out.append((f"h{l}.{name}", shape, decay))
        if is_moe(cfg, l):
            out.append((f"h{l}.routerw", (E, C), True))
        else:
            out += [(f"h{l}.{name}", shape, decay) for name, shape, decay in mlp]
    out += [("lnfw", (C,), False), ("lnfb", (C,), False)]
    for l in range(L):
        if is_moe(cfg, l):
            out += [(f"h{l}.e{e}.{name}", shape, decay) for e in range(E)
                    for name, shape, decay in mlp]
    return out


def moe_mlp(cfg, p, l, h):
    """MoE block l's MLP on h (B,T,C), routed micro-batch by micro-batch; returns its
    output and the micro-batches' load-balancing losses summed."""
    B, T, C = h.shape
    E, K, A = cfg["E"], cfg["K"], cfg["A"]
    x = h.reshape(-1, C)
    outs, aux = [], 0.0
    per = cfg["micro"] * T
    for m0 in range(0, x.shape[0], per):
        xs = x[m0:m0 + per]
        N = xs.shape[0]
        probs = (xs @ p[f"h{l}.routerw"].T).softmax(dim=-1)
        order = torch.sort(probs.detach(), dim=-1, descending=True, stable=True).indices
        choice = order[:, :K]
        cap = max(1, math.ceil(cfg["F"] * N * K / E))
        count = [0] * E
        kept = torch.zeros(N, K, dtype=torch.bool)
        for j in range(K):
            for t in range(N):
                e = choice[t, j].item()
                if count[e] < cap:
                    kept[t, j] = True
                    count[e] += 1
                else:
                    DROPPED[0] += 1
        y = torch.zeros_like(xs)
        for e in range(E):
            rows = [(t, j) for t in range(N) for j in range(K) if kept[t, j] and choice[t, j] == e]
            if not rows:
                continue
            idx = torch.tensor([t for t, _ in rows])
            q = lambda n: p[f"h{l}.e{e}.{n}"]
            hid = F.gelu(xs[idx] @ q("fcw").T + q("fcb"), approximate="tanh")
            o = hid @ q("fcprojw").T + q("fcprojb")
            y = y.index_add(0, idx, probs[idx, e].unsqueeze(1) * o)
        outs.append(y)
        frac = torch.zeros(E)
        for e in range(E):
            frac[e] = (choice == e).sum().item() / (N * K)
        aux = aux + A * E * (frac * probs.mean(dim=0)).sum()
    return torch.cat(outs).view(B, T, C), aux


def gpt_logits(cfg, p, inp):
    """The GPT's logits (B,T,V) on inp (B,T) and the sum of its MoE blocks'
    load-balancing losses (0.0 when dense)."""
    L, NH, C = cfg["L"], cfg["NH"], cfg["C"]
    B, T = inp.shape
    HS = C // NH
    x = p["wte"][inp] + p["wpe"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    aux = 0.0
    for l in range(L):
        q = lambda n: p[f"h{l}.{n}"]
        h = F.layer_norm(x, (C,), q("ln1w"), q("ln1b"), 1e-5)
        qkv = h @ q("qkvw").T + q("qkvb")
        qq, kk, vv = (t.view(B, T, NH, HS).transpose(1, 2) for t in qkv.split(C, dim=2))
        att = (qq @ kk.transpose(-2, -1)) / math.sqrt(HS)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ vv).transpose(1, 2).reshape(B, T, C)
        x = x + y @ q("attprojw").T + q("attprojb")
        h = F.layer_norm(x, (C,), q("ln2w"), q("ln2b"), 1e-5)
        if is_moe(cfg, l):
            y, a = moe_mlp(cfg, p, l, h)
            x = x + y
            aux = aux + a
            continue
        h = F.gelu(h @ q("fcw").T + q("fcb"), approximate="tanh")
        x = x + h @ q("fcprojw").T + q("fcprojb")
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], 1e-5)
    return x @ p["wte"].T, aux


def gpt_loss(cfg, p, inp, tgt):
    logits, aux = gpt_logits(cfg, p, inp)
    micros = inp.shape[0] // cfg["micro"]
    return F.cross_entropy(logits.view(-1, cfg["V"]), tgt.reshape(-1)) + aux / micros


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


def llama_logits(p, inp, NH, KVH, theta):
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


def llama_layout(V, C, L, NH, KVH, FF):
    """(name, shape, decay) of a Llama's tensors under Hugging Face's names
    (train_gpt's export): the matrices decay, the norms' weights do not
    (train_gpt's AdamW groups)."""
    HS = C // NH
    out = [("model.embed_tokens.weight", (V, C), True)]
    for l in range(L):
        pre = f"model.layers.{l}."
        out += [(pre + "input_layernorm.weight", (C,), False),
                (pre + "self_attn.q_proj.weight", (C, C), True),
                (pre + "self_attn.k_proj.weight", (KVH * HS, C), True),
                (pre + "self_attn.v_proj.weight", (KVH * HS, C), True),
                (pre + "self_attn.o_proj.weight", (C, C), True),
                (pre + "post_attention_layernorm.weight", (C,), False),
                (pre + "mlp.gate_proj.weight", (FF, C), True),
                (pre + "mlp.up_proj.weight", (FF, C), True),
                (pre + "mlp.down_proj.weight", (C, FF), True)]
    return out + [("model.norm.weight", (C,), False), ("lm_head.weight", (V, C), True)]
