#!/usr/bin/env bash
# train_gpt --arch llama in the model-parallel runtime (docs/model.md
# "Llama"): pipeline parallel with GPipe, 1F1B and interleaved 1F1B, even
# and uneven --pp-layers (the first stage holds embed_tokens, the last the
# final norm and the untied lm_head), tensor parallel with its kv heads
# split (kv heads = tp) and sequence parallel, selective and full
# recompute, --trace and context parallel (ring attention over the kv
# heads, rotary positions of each zigzag chunk's own; cp 2, cp 2 x dp 2,
# cp 2 x tp 2 + sp, cp 2 x pp 2) print the losses and gradient norms of
# one process over 10 steps (1e-5 relative); a checkpoint of one process resumes in tp
# 2 x pp 2 and back, and tp 2 x pp 2 reads and exports one process's
# safetensors file unchanged. A split's limits (a layer for every stage: exactly 4
# stages of 4 layers run, 5 are refused; --pp-layers entries >= 1; ffn
# dividing among tp) are checked before training.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
job_prefix=llamamp
W=$work
# G = 8 sequences a step in every layout
model=(--arch llama --layers 4 --channels 32 --heads 4 --kv-heads 2 --ffn 40 --seq 16
    --global-batch 8 --steps 10 --lr 3e-3 --rope-theta 500)
small=(--arch llama --layers 4 --channels 32 --heads 4 --seq 8 --micro-batch 2 --steps 1)
# kv heads split over tp: kv heads = tp runs (below); fewer kv heads than
# tp (replicated) and their refusal are train_gpt_llama_kvrep.sh's
refuse 2 "llama: ffn 41 does not divide among tp 2 ranks" "${small[@]}" --tp 2 \
    --kv-heads 2 --ffn 41
refuse 5 "4 layers are fewer than the 5 pipeline stages" "${small[@]}" --pp 5 --grad-accum 5
refuse 2 "pp-layers" "${small[@]}" --pp 2 --grad-accum 2 --pp-layers 0,4

timeout 60 "$bin/train_gpt" "${model[@]}" --micro-batch 4 --loss-log "$W/one" >/dev/null \
    2>"$W/err" || fail "one process: $(cat "$W/err")"
# layout NAME N ARGS...: N processes train the model as ARGS say
layout() {
    local name=$1 n=$2
    shift 2
    msrun_n "$n" "${model[@]}" "$@" --loss-log "$W/$name" >/dev/null 2>"$W/err" ||
        fail "$name: $(cat "$W/err")"
    close "$W/$name" "$W/one" 10
}
layout pp2-gpipe 2 --pp 2 --micro-batch 2 --schedule gpipe
layout pp2-1f1b-uneven 2 --pp 2 --micro-batch 2 --schedule 1f1b --pp-layers 1,3
layout pp2-interleaved 2 --pp 2 --micro-batch 2 --schedule interleaved --virtual-stages 2
layout pp2-interleaved-uneven 2 --pp 2 --micro-batch 2 --schedule interleaved \
    --virtual-stages 2 --pp-layers 1,1,1,1
layout pp4 4 --pp 4 --micro-batch 2 --schedule 1f1b
layout pp2-full-dp2-zero1 4 --pp 2 --dp 2 --micro-batch 2 --schedule 1f1b --pp-layers 3,1 \
    --recompute full --zero 1
layout tp2 2 --tp 2 --micro-batch 4
layout tp2-sp 2 --tp 2 --sp --micro-batch 4
layout tp2-pp2-sp-selective 4 --tp 2 --pp 2 --sp --micro-batch 2 --recompute selective
layout tp2-dp2-zero2 4 --tp 2 --dp 2 --micro-batch 2 --zero 2
layout selective 1 --micro-batch 4 --recompute selective
layout cp2 2 --cp 2 --micro-batch 4
layout cp2-dp2 4 --cp 2 --dp 2 --micro-batch 2
layout cp2-tp2-sp 4 --cp 2 --tp 2 --sp --micro-batch 4
layout cp2-pp2-selective 4 --cp 2 --pp 2 --micro-batch 2 --schedule 1f1b --recompute selective
layout full-trace 1 --micro-batch 2 --recompute full --trace "$W/trace.json"
python3 -c 'import json, sys; t = json.load(open(sys.argv[1])); assert t["traceEvents"]' \
    "$W/trace.json" || fail "--trace wrote no spans"
# resharding: one process saves at step 4, tp 2 x pp 2 resumes it to the
# same steps 5..8 and saves, and one process resumes that to 9..10
msrun_n 1 "${model[@]}" --micro-batch 4 --steps 4 --ckpt-every 4 \
    --ckpt-dir "$W/ck" >/dev/null 2>"$W/err" || fail "saving: $(cat "$W/err")"
msrun_n 4 "${model[@]}" --tp 2 --pp 2 --micro-batch 2 --steps 8 --ckpt-every 4 \
    --ckpt-dir "$W/ck" --resume --loss-log "$W/res" >/dev/null 2>"$W/err" ||
    fail "tp2 x pp2 resume: $(cat "$W/err")"
grep -q "resumed from step 4" "$W/err" || fail "tp2 x pp2 did not resume: $(cat "$W/err")"
msrun_n 1 "${model[@]}" --micro-batch 4 --ckpt-dir "$W/ck" --resume \
    --loss-log "$W/res1" >/dev/null 2>"$W/err" || fail "back: $(cat "$W/err")"
grep -q "resumed from step 8" "$W/err" || fail "one process did not resume: $(cat "$W/err")"
resumed "$W/one" "$W/res" 4 "$W/res1" 2
# the split tensors are the whole model's: tp 2 x pp 2 exports (Hugging
# Face's names) the file one process exports, byte for byte
msrun_n 1 "${model[@]}" --micro-batch 4 --steps 2 --export-safetensors "$W/one.st" \
    >/dev/null 2>"$W/err" || fail "one process export: $(cat "$W/err")"
msrun_n 4 "${model[@]}" --tp 2 --pp 2 --micro-batch 2 --steps 0 --init-from "$W/one.st" \
    --export-safetensors "$W/mp.st" >/dev/null 2>"$W/err" || fail "tp2 x pp2 export: $(cat "$W/err")"
cmp -s "$W/one.st" "$W/mp.st" || fail "tp 2 x pp 2 changed the weights it read"
echo "train_gpt_llama_mp: ok"
