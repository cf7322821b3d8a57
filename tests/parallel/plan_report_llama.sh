#!/usr/bin/env bash
# The planner's runtime accounting for train_gpt --arch llama (RMSNorm,
# SwiGLU of width ffn, grouped-query attention, no positions, untied head)
# against the runtime's own count: for one process (without msrun) and
# for Llama layouts of 4 ranks (dp 4 with ZeRO-3, dp 2 x pp 2, tp 2
# with sp x dp 2, tp 2 x pp 2 with sp; kv heads at 1 and at heads, the
# latter with tp 4, sp and full recompute; fewer kv heads than tp,
# replicated: tp 4 with 1 kv head, and with 2, sp and selective
# recompute; cp 2 x dp 2 and cp 2 x tp 2 with sp, whose ring repeats the
# kv heads; ZeRO-3 on tp 2 with sp x dp 2), train_gpt --report's counts of every rank must equal
# plan_gpt --arch llama --ranks's to the byte; the ZeRO-3, the pp and the
# cp x tp layouts run bf16 products (--precision bf16-runtime), whose
# operand scratch must be plan_gpt's too (a first stage's largest
# products a Llama's q, k and v, and its gate and up). Then train_gpt
# --plan --explain 1 for a Llama, fp32 and bf16, must count it as
# plan_gpt does, and --plan-all offer plan_gpt --all's layouts, cp among
# them.
# One process under ZeRO-3 (on the whole-model path, and in the
# model-parallel runtime with recompute): the transient peak is the
# planned bound.
source "$(dirname "$0")/plan_report_lib.sh"

s=schedule
# ffn 48 (not the default 88) and 2 kv heads of 4: every width differs
# from the GPT's
llama=(--arch llama --ffn 48 --kv-heads 2)
plan_extra=("${llama[@]}")
train_extra=("${llama[@]}")

# one process, without msrun: its counts (the whole model's activations
# and work) are plan_gpt --world 1's
one=(--layers 4 --channels 32 --heads 4 --seq 16 "${llama[@]}")
"$bin/plan_gpt" "${one[@]}" --world 1 --global-batch 2 --ranks \
    --fix dp=1,tp=1,pp=1,sp=0,zero=0,recompute=none,micro_batch=2 >"$work/one.plan" 2>&1 ||
    fail "plan_gpt --world 1: $(cat "$work/one.plan")"
timeout -k 5 60 "$bin/train_gpt" "${one[@]}" --micro-batch 2 --steps 1 --report \
    >"$work/one.out" 2>"$work/one.err" || fail "train_gpt, one process: $(tail -5 "$work/one.err")"
want=$(sed -n 's/^\(rank 0 params .* work [0-9]*\) acts_peak .*/\1/p' "$work/one.plan")
got=$(sed -n 's/.*train_gpt: rank 0 zero 0: params \([0-9]*\) grads \([0-9]*\) optim \([0-9]*\) transient-peak [0-9]* bytes (shard \([0-9]*\) of [0-9]* elements, \([0-9]*\) replicated);.*; buckets \([0-9]*\); work \([0-9]*\) bytes;.*/rank 0 params \1 grads \2 optim \3 shard \4 replicated \5 buckets \6 work \7/p' "$work/one.err")
[[ -n "$want" && "$got" == "$want" ]] || fail "one process counted
  $got
planned
  $want"
echo "one process: counted as planned"
# one process under ZeRO-3 (no other rank, so its temporaries' peak does
# not depend on timing): the planner replays the runtime's visits (a
# Llama's untied head: none to the embeddings around the head), so the
# transient peak is the planned bound to the byte
z3=(--bucket-mb 0.02 --zero-min-bytes 20000)
"$bin/plan_gpt" "${one[@]}" --world 1 --global-batch 2 "${z3[@]}" --ranks \
    --fix dp=1,tp=1,pp=1,sp=0,zero=3,recompute=none,micro_batch=2 >"$work/z3.plan" 2>&1 ||
    fail "plan_gpt --world 1 zero 3: $(cat "$work/z3.plan")"
timeout -k 5 60 "$bin/train_gpt" "${one[@]}" --micro-batch 2 --steps 1 --report --zero 3 "${z3[@]}" \
    >"$work/z3.out" 2>"$work/z3.err" || fail "train_gpt, one process, ZeRO-3: $(tail -5 "$work/z3.err")"
want=$(sed -n 's/^rank 0 .* transient_bound \([0-9]*\).*/\1/p' "$work/z3.plan")
got=$(sed -n 's/.*train_gpt: rank 0 zero 3: .* transient-peak \([0-9]*\) bytes.*/\1/p' "$work/z3.err")
[[ -n "$want" && "$got" == "$want" ]] || fail "one process, ZeRO-3: transient peak $got, planned $want"
echo "one process, ZeRO-3: transient peak $got bytes, as planned"
# ZeRO-3 in the model-parallel runtime: tp 2 with sp x dp 2, and one
# process with recompute (its transient peak exactly the replay's)
check 4 dp=2,tp=2,pp=1,sp=1,zero=3,recompute=selective,micro_batch=1 --tp 2 --sp --zero 3 \
    --recompute selective --grad-accum 2 --bucket-mb 0.01 --zero-min-bytes 0
one_peak dp=1,tp=1,pp=1,sp=0,zero=3,recompute=selective,micro_batch=2 --zero 3 \
    --recompute selective --grad-accum 2
# bf16 products (--precision bf16) keep the same state: a layout in bf16
# checks every count of fp32 and every rank's operand scratch (the largest
# product's op(A) and op(B)). With the head on a rank its logits are the
# largest; on a first stage without it a Llama's own widths are: q, k and
# v (C + 2 kv heads' widths: 48 of a GPT's 96, kv heads 1 and ffn 16) on
# dp 2 x pp 2, and gate and up (2 ffn / tp: 48 of a GPT's 24) on tp 2 x pp 2
bf16() {
    plan_extra=(--arch llama --ffn "$1" --kv-heads "$2" --precision bf16-runtime)
    train_extra=(--arch llama --ffn "$1" --kv-heads "$2" --precision bf16)
}
bf16 48 2
check 4 dp=4,tp=1,pp=1,sp=0,zero=3,recompute=none,micro_batch=2 --zero 3 --bucket-mb 0.02 \
    --zero-min-bytes 20000
# kv heads at its bounds: 1 and = heads (4)
bf16 16 1
check 4 dp=2,tp=1,pp=2,sp=0,zero=0,recompute=none,micro_batch=2,$s=1f1b --pp 2 --grad-accum 2
# the chunked head on the untied lm_head, tp's slices 40 rows a chunk
check 4 dp=2,tp=2,pp=1,sp=0,zero=1,recompute=none,micro_batch=2 --tp 2 --zero 1 --head-chunk 40
plan_extra=(--arch llama --ffn 48 --kv-heads 4)
train_extra=("${plan_extra[@]}")
check 4 dp=1,tp=4,pp=1,sp=1,zero=0,recompute=full,micro_batch=2 --dp 1 --tp 4 --sp \
    --recompute full
# fewer kv heads than tp: 1 and 2 kv heads on tp 4, each rank holding one
# kv head's rows of wk and wv (replicated on 4 and on 2 ranks)
plan_extra=(--arch llama --ffn 48 --kv-heads 1)
train_extra=("${plan_extra[@]}")
check 4 dp=1,tp=4,pp=1,sp=0,zero=0,recompute=none,micro_batch=2 --dp 1 --tp 4
plan_extra=(--arch llama --ffn 48 --kv-heads 2)
train_extra=("${plan_extra[@]}")
check 4 dp=1,tp=4,pp=1,sp=1,zero=0,recompute=selective,micro_batch=2 --dp 1 --tp 4 --sp \
    --recompute selective
plan_extra=("${llama[@]}")
train_extra=("${llama[@]}")
check 4 dp=2,tp=2,pp=1,sp=1,zero=1,recompute=selective,micro_batch=2 --tp 2 --sp --zero 1 \
    --recompute selective
bf16 48 2
check 4 dp=1,tp=2,pp=2,sp=1,zero=0,recompute=selective,micro_batch=2,$s=1f1b --tp 2 --pp 2 \
    --sp --recompute selective --grad-accum 2
# context parallel: with fewer kv heads than heads a rank's ring repeats
# a chunk's kv heads for their query heads, and their gradients, in two
# buffers of (T/cp/2, 2 C/tp) (work); cp 2 x dp 2 (dp's 4 replicas), and
# cp 2 x tp 2 with sp in bf16 (1 kv head, replicated on both tp ranks)
plan_extra=("${llama[@]}")
train_extra=("${llama[@]}")
check 4 dp=2,tp=1,pp=1,cp=2,sp=0,zero=0,recompute=none,micro_batch=2 --cp 2
bf16 48 1
check 4 dp=1,tp=2,pp=1,cp=2,sp=1,zero=0,recompute=selective,micro_batch=2 --cp 2 --tp 2 --sp \
    --recompute selective

# train_gpt --plan --explain 1 of a Llama is plan_gpt's, on a cluster
# written by hand
cp "$(dirname "$0")/plan_cluster.txt" "$work/cluster"
model=(--layers 4 --channels 32 --heads 4 --seq 16 --global-batch 8 "${llama[@]}")
"$bin/plan_gpt" "${model[@]}" --world 4 --cluster "$work/cluster" --explain 1 \
    >"$work/llama.plan" 2>&1 || fail "plan_gpt: $(cat "$work/llama.plan")"
job=plan-$$-$RANDOM
jobs_started+=("$job")
timeout -k 5 60 "${msrun_cmd[@]}" --worker_num=4 --local_worker_num=4 --job_id="$job" \
    "${worker_env[@]}" "$bin/train_gpt" "${model[@]}" --plan --cluster "$work/cluster" \
    --explain 1 >"$work/llama.out" 2>"$work/llama.err" ||
    fail "train_gpt --plan: $(cat "$work/llama.err")"
plan_said() { sed 's/^\[node [0-9]* rank [0-9]*\] //' "$1" | sed -n '/^plan 1:/,$p'; }
[[ -n "$(plan_said "$work/llama.out")" ]] || fail "--plan: $(cat "$work/llama.out")"
diff <(plan_said "$work/llama.plan") <(plan_said "$work/llama.out") >"$work/llama.diff" ||
    fail "train_gpt --plan of a Llama differs from plan_gpt: $(cat "$work/llama.diff")"
# and in bf16, on one process: --plan --precision bf16 is plan_gpt's
# --precision bf16-runtime, its operand scratch among the bytes
"$bin/plan_gpt" "${model[@]}" --world 1 --cluster "$work/cluster" --explain 1 \
    --precision bf16-runtime >"$work/bf16.plan" 2>&1 || fail "plan_gpt bf16: $(cat "$work/bf16.plan")"
timeout -k 5 60 "$bin/train_gpt" "${model[@]}" --plan --cluster "$work/cluster" --explain 1 \
    --precision bf16 >"$work/bf16.out" 2>"$work/bf16.err" ||
    fail "train_gpt --plan --precision bf16: $(cat "$work/bf16.err")"
grep -q "bf16 operand scratch" "$work/bf16.out" || fail "--plan bf16: $(cat "$work/bf16.out")"
diff <(plan_said "$work/bf16.plan") <(plan_said "$work/bf16.out") >"$work/bf16.diff" ||
    fail "train_gpt --plan of a Llama in bf16 differs from plan_gpt: $(cat "$work/bf16.diff")"
# --plan-all of a Llama offers what the runtime runs, context parallel
# among it: its table is plan_gpt --all's, cp 2 and 4 in it
"$bin/plan_gpt" "${model[@]}" --world 4 --cluster "$work/cluster" --all >"$work/all.plan" 2>&1 ||
    fail "plan_gpt --all: $(cat "$work/all.plan")"
job=plan-$$-$RANDOM
jobs_started+=("$job")
timeout -k 5 60 "${msrun_cmd[@]}" --worker_num=4 --local_worker_num=4 --job_id="$job" \
    "${worker_env[@]}" "$bin/train_gpt" "${model[@]}" --plan --plan-all --cluster "$work/cluster" \
    >"$work/all.out" 2>"$work/all.err" || fail "train_gpt --plan-all: $(cat "$work/all.err")"
rows() { sed 's/^\[node [0-9]* rank [0-9]*\] //' "$1" | awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/'; }
diff <(rows "$work/all.plan") <(rows "$work/all.out") >"$work/all.diff" ||
    fail "train_gpt --plan-all of a Llama differs from plan_gpt --all: $(head -20 "$work/all.diff")"
cps=$(rows "$work/all.out" | awk '{print $5}' | sort -u | tr '\n' ' ')
[[ "$cps" == "1 2 4 " ]] || fail "--plan-all of a Llama offers cp '$cps': $(head -5 "$work/all.out")"
echo "ok: $checked Llama layouts, every rank's count equals the plan; --plan's too"
