#!/usr/bin/env bash
# train_gpt's --export-safetensors file loaded by a reader written from the
# format's specification into a plain PyTorch GPT (safetensors_torch.py):
# the same logits as train_gpt's --dump-logits on a fixed batch (1e-5),
# for weights trained in one process, by a tp 2 x pp 2 mesh and by a MoE
# model's dp 2 x ep 2 x tp 2; skipped
# (exit 77) when /usr/bin/python3 cannot import torch and numpy.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
skip_without_torch
job_test_setup
job_prefix=stt
W=$work
small=(--layers 3 --channels 48 --heads 4 --seq 24 --micro-batch 3 --grad-accum 2)
timeout 60 "$bin/train_gpt" "${small[@]}" --steps 3 --export-safetensors "$W/a.st" \
    --dump-logits "$W/a.logits" >/dev/null 2>"$W/err" || fail "train_gpt: $(cat "$W/err")"
msrun_n 4 "${small[@]}" --tp 2 --pp 2 --steps 2 --export-safetensors "$W/m.st" >/dev/null \
    2>"$W/err" || fail "tp2 x pp2: $(cat "$W/err")"
timeout 60 "$bin/train_gpt" "${small[@]}" --steps 0 --init-from "$W/m.st" \
    --dump-logits "$W/m.logits" >/dev/null 2>"$W/err" || fail "init-from: $(cat "$W/err")"
# a Mixture-of-Experts model (its experts "h<l>.e<e>.*") from ep 2 x tp 2
moe=(--experts 4 --top-k 2 --moe-every 2 --capacity-factor 1.25)
msrun_n 4 "${small[@]}" "${moe[@]}" --dp 2 --ep 2 --tp 2 --steps 2 \
    --export-safetensors "$W/e.st" >/dev/null 2>"$W/err" || fail "ep2 x tp2: $(cat "$W/err")"
timeout 60 "$bin/train_gpt" "${small[@]}" "${moe[@]}" --steps 0 --init-from "$W/e.st" \
    --dump-logits "$W/e.logits" >/dev/null 2>"$W/err" || fail "MoE init-from: $(cat "$W/err")"
timeout 120 /usr/bin/python3 "$MSRUN_SOURCE/tests/parallel/safetensors_torch.py" \
    "$W/a.st" "$W/a.logits" 4 -- "$W/m.st" "$W/m.logits" 4 -- \
    "$W/e.st" "$W/e.logits" 4 4 2 2 1.25 || fail "PyTorch's logits differ (above)"
echo "safetensors_torch: ok"
