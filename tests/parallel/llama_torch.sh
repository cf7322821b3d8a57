#!/usr/bin/env bash
# train_gpt --arch llama against the same Llama in plain PyTorch
# (llama_torch.py): the weights through --export-safetensors (Hugging
# Face's names), the logits of --dump-logits' batch (1e-5), the loss and
# every tensor's gradient of --dump-grads (1e-5, 1e-4), at the seed's
# weights with kv heads below the heads and after 3 steps of dp 2 with
# ZeRO 1 and kv heads equal to the heads; skipped (exit 77) when
# /usr/bin/python3 cannot import torch and numpy.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
skip_without_torch
job_test_setup
job_prefix=llt
W=$work
# a byte file of text-like data (the batch's next bytes are the targets)
python3 -c 'import sys
words = ["the", "model", "trains", "on", "bytes", "of", "text", "and", "rotary", "heads"]
out = " ".join(words[(i * 7 + i // 3) % len(words)] for i in range(2000))
open(sys.argv[1], "w").write(out)' "$W/data.txt"
model=(--arch llama --layers 2 --channels 32 --heads 4 --ffn 40 --seq 12 --micro-batch 3
    --rope-theta 1000 --data "$W/data.txt")
dumps() { # PREFIX: the export, the logits and the gradients
    echo --export-safetensors "$W/$1.st" --dump-logits "$W/$1.logits" --dump-grads "$W/$1.grads"
}
timeout 60 "$bin/train_gpt" "${model[@]}" --kv-heads 2 --steps 0 $(dumps a) >/dev/null \
    2>"$W/err" || fail "train_gpt: $(cat "$W/err")"
msrun_n 2 "${model[@]}" --kv-heads 4 --steps 3 --zero 1 --lr 1e-2 $(dumps b) >/dev/null \
    2>"$W/err" || fail "dp 2: $(cat "$W/err")"
timeout 120 /usr/bin/python3 "$MSRUN_SOURCE/tests/parallel/llama_torch.py" "$W/a.st" \
    "$W/a.logits" "$W/a.grads" "$W/data.txt" 4 2 1000 || fail "kv heads 2 differ (above)"
timeout 120 /usr/bin/python3 "$MSRUN_SOURCE/tests/parallel/llama_torch.py" "$W/b.st" \
    "$W/b.logits" "$W/b.grads" "$W/data.txt" 4 4 1000 || fail "trained, kv heads 4 differ (above)"
echo "llama_torch: ok"
