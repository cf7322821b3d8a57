#!/usr/bin/env bash
# ZeRO-3 in the model-parallel runtime (docs/model.md "The 3-D runtime"):
# each tp rank's slice is sharded over its dp group, every segment
# gathered over dp just before its forward and its backward and freed
# after, gradients reduce-scattered; under context parallel the shard
# group is dp x cp. dp 2 x tp 2 with ZeRO-3 (with sp, and without it with
# full recompute), dp 2 x cp 2 and, for the Llama, cp 2 x tp 2 with sp
# print the losses and gradient norms of one process over 10 steps (1e-5
# relative), for the GPT and --arch llama, and ZeRO-2's bitwise in the
# same layout; so do dp 2 x pp 2 under 1F1B, under GPipe with an uneven
# split and under the interleaved schedule (the first stage gathers the
# tied wte for the last stage's head copy after every update); dp 2 x tp
# 2, dp 2 x cp 2 and dp 2 x pp 2 ZeRO-3 checkpoints resume bitwise in
# their layout and reshard into one process; the cp and pp layouts'
# --report equals plan_gpt --ranks to the byte on every rank (shards over
# dp x cp; a pipeline stage's part). A MoE model's layouts are
# train_gpt_zero3_moe.sh's.
# (plan_report_lib.sh: set -euo pipefail, $bin, job_env.sh, $work, check)
source "$(dirname "$0")/plan_report_lib.sh"
job_prefix=zero3mp
W=$work

# G = 8 sequences a step in every layout
gpt=(--layers 3 --channels 32 --heads 4 --seq 16 --global-batch 8 --steps 10 --lr 3e-3)
llama=(--arch llama --layers 3 --channels 32 --heads 4 --kv-heads 2 --ffn 40 --seq 16
    --global-batch 8 --steps 10 --lr 3e-3 --rope-theta 500)
# layout NAME ONE N ARGS...: N processes train as ARGS say, the losses and
# norms of the one-process log ONE
layout() {
    local name=$1 one=$2 n=$3
    shift 3
    msrun_n "$n" "$@" --loss-log "$W/$name" >/dev/null 2>"$W/err" || fail "$name: $(cat "$W/err")"
    grep -q "zero 3" "$W/err" || fail "$name: not ZeRO-3: $(cat "$W/err")"
    close "$W/$name" "$W/$one" 10 "$name"
}
timeout 60 "$bin/train_gpt" "${gpt[@]}" --micro-batch 4 --loss-log "$W/gpt1" >/dev/null \
    2>"$W/err" || fail "GPT, one process: $(cat "$W/err")"
timeout 60 "$bin/train_gpt" "${llama[@]}" --micro-batch 4 --loss-log "$W/llama1" >/dev/null \
    2>"$W/err" || fail "Llama, one process: $(cat "$W/err")"
# buckets of 2000 bytes cut the layers; every segment is sharded
z3=(--zero 3 --zero-min-bytes 0 --bucket-mb 0.002)
layout gpt-sp gpt1 4 "${gpt[@]}" "${z3[@]}" --dp 2 --tp 2 --sp --micro-batch 2 --grad-accum 2
layout gpt-full gpt1 4 "${gpt[@]}" "${z3[@]}" --dp 2 --tp 2 --micro-batch 4 --recompute full
layout llama-sp llama1 4 "${llama[@]}" "${z3[@]}" --dp 2 --tp 2 --sp --micro-batch 2 \
    --grad-accum 2 --recompute selective
# the gathers copy the parameters and the gradients go ZeRO-2's way: the
# same layout under ZeRO-2 gives the same bits
msrun_n 4 "${llama[@]}" "${z3[@]}" --zero 2 --dp 2 --tp 2 --sp --micro-batch 2 --grad-accum 2 \
    --recompute selective --loss-log "$W/llama-sp-z2" >/dev/null 2>"$W/err" ||
    fail "ZeRO-2: $(cat "$W/err")"
diff "$W/llama-sp" "$W/llama-sp-z2" || fail "ZeRO-3 and ZeRO-2 differ in dp 2 x tp 2 + sp"
# context parallel: dp 2 x cp 2 (the shards over the 4 ranks of dp x
# cp), and cp 2 x tp 2 with sp (dp 1: the shards over cp alone); ZeRO-2's
# bits in each
layout gpt-cp gpt1 4 "${gpt[@]}" "${z3[@]}" --dp 2 --cp 2 --micro-batch 2 --grad-accum 2
grep -q "mesh dp 2 x pp 1 x cp 2 x tp 1" "$W/err" || fail "gpt-cp: not cp 2: $(cat "$W/err")"
layout llama-cp llama1 4 "${llama[@]}" "${z3[@]}" --cp 2 --tp 2 --sp --micro-batch 4 \
    --recompute selective
grep -q "mesh dp 1 x pp 1 x cp 2 x tp 2" "$W/err" || fail "llama-cp: not cp 2: $(cat "$W/err")"
msrun_n 4 "${gpt[@]}" "${z3[@]}" --zero 2 --dp 2 --cp 2 --micro-batch 2 --grad-accum 2 \
    --loss-log "$W/gpt-cp-z2" >/dev/null 2>"$W/err" || fail "ZeRO-2 cp: $(cat "$W/err")"
diff "$W/gpt-cp" "$W/gpt-cp-z2" || fail "ZeRO-3 and ZeRO-2 differ in dp 2 x cp 2"
msrun_n 4 "${llama[@]}" "${z3[@]}" --zero 2 --cp 2 --tp 2 --sp --micro-batch 4 \
    --recompute selective --loss-log "$W/llama-cp-z2" >/dev/null 2>"$W/err" ||
    fail "ZeRO-2 cp x tp: $(cat "$W/err")"
diff "$W/llama-cp" "$W/llama-cp-z2" || fail "ZeRO-3 and ZeRO-2 differ in cp 2 x tp 2 + sp"

# pipeline parallel: dp 2 x pp 2 under 1F1B and, with 4 layers, the
# interleaved schedule (2 virtual stages a rank: each stage's segments
# gathered at every visit); GPipe with the uneven split 2,1; ZeRO-2's bits
# in 1F1B and interleaved
pp=(--dp 2 --pp 2 --micro-batch 2 --grad-accum 2)
gpt4=("${gpt[@]}" --layers 4)
timeout 60 "$bin/train_gpt" "${gpt4[@]}" --micro-batch 4 --loss-log "$W/gpt4" >/dev/null \
    2>"$W/err" || fail "GPT of 4 layers, one process: $(cat "$W/err")"
layout gpt-pp gpt1 4 "${gpt[@]}" "${z3[@]}" "${pp[@]}"
grep -q "mesh dp 2 x pp 2 x cp 1 x tp 1; schedule 1f1b" "$W/err" ||
    fail "gpt-pp: not pp 2 under 1F1B: $(cat "$W/err")"
layout gpt-pp-gpipe gpt1 4 "${gpt[@]}" "${z3[@]}" "${pp[@]}" --schedule gpipe --pp-layers 2,1
grep -q "layers per virtual stage 2,1 (uneven split)" "$W/err" ||
    fail "gpt-pp-gpipe: not split 2,1: $(cat "$W/err")"
layout gpt-pp-int gpt4 4 "${gpt4[@]}" "${z3[@]}" "${pp[@]}" --schedule interleaved \
    --virtual-stages 2
grep -q "schedule interleaved, 2 virtual stages" "$W/err" ||
    fail "gpt-pp-int: not interleaved: $(cat "$W/err")"
msrun_n 4 "${gpt[@]}" "${z3[@]}" --zero 2 "${pp[@]}" --loss-log "$W/gpt-pp-z2" >/dev/null \
    2>"$W/err" || fail "ZeRO-2 pp: $(cat "$W/err")"
diff "$W/gpt-pp" "$W/gpt-pp-z2" || fail "ZeRO-3 and ZeRO-2 differ in dp 2 x pp 2"
msrun_n 4 "${gpt4[@]}" "${z3[@]}" --zero 2 "${pp[@]}" --schedule interleaved --virtual-stages 2 \
    --loss-log "$W/gpt-pp-int-z2" >/dev/null 2>"$W/err" || fail "ZeRO-2 interleaved: $(cat "$W/err")"
diff "$W/gpt-pp-int" "$W/gpt-pp-int-z2" ||
    fail "ZeRO-3 and ZeRO-2 differ in dp 2 x pp 2, interleaved"

# checkpoints: dp 2 x tp 2 and dp 2 x cp 2 ZeRO-3 stopped at step 4 and
# resumed in their layout give steps 5..10 bitwise; resumed by one process
# (ZeRO-0, the layout-free format), those of the run that never stopped
# (1e-5). ckpt NAME ARGS...: the layout of the uninterrupted run NAME.
ckpt() {
    local name=$1
    shift
    rm -rf "$W/ck" "$W/ck1" "$W/first" "$W/second" "$W/one"
    msrun_n 4 "$@" --steps 4 --ckpt-every 4 --ckpt-dir "$W/ck" --loss-log "$W/first" \
        >/dev/null 2>"$W/err" || fail "$name, first part: $(cat "$W/err")"
    cp -r "$W/ck" "$W/ck1"
    msrun_n 4 "$@" --ckpt-dir "$W/ck" --resume --loss-log "$W/second" >/dev/null \
        2>"$W/err" || fail "$name, resumed: $(cat "$W/err")"
    grep -q "resumed from step 4" "$W/err" || fail "$name: no resume: $(cat "$W/err")"
    diff "$W/$name" <(cat "$W/first" "$W/second") ||
        fail "$name: the resumed ZeRO-3 run differs from the uninterrupted one"
    msrun_n 1 "${gpt[@]}" --micro-batch 4 --ckpt-dir "$W/ck1" --resume --loss-log "$W/one" \
        >/dev/null 2>"$W/err" || fail "$name, resharded into one process: $(cat "$W/err")"
    grep -q "resumed from step 4" "$W/err" ||
        fail "$name: one process did not resume: $(cat "$W/err")"
    resumed "$W/gpt1" "$W/one" 6
}
ckpt gpt-sp "${gpt[@]}" "${z3[@]}" --dp 2 --tp 2 --sp --micro-batch 2 --grad-accum 2
ckpt gpt-cp "${gpt[@]}" "${z3[@]}" --dp 2 --cp 2 --micro-batch 2 --grad-accum 2
ckpt gpt-pp "${gpt[@]}" "${z3[@]}" "${pp[@]}"
# the planner's count of ZeRO-3 under cp (docs/plan.md): dp 2 x cp 2,
# every segment sharded over the 4 ranks; cp 2 x tp 2 with sp, full
# recompute and GPipe, the shards over cp alone
check 4 dp=2,tp=1,pp=1,cp=2,sp=0,zero=3,recompute=none,micro_batch=2 --cp 2 --zero 3 \
    --bucket-mb 0.01 --zero-min-bytes 0
check 4 dp=1,tp=2,pp=1,cp=2,sp=1,zero=3,recompute=full,micro_batch=1,schedule=gpipe --cp 2 \
    --tp 2 --sp --zero 3 --grad-accum 2 --schedule gpipe --recompute full --bucket-mb 0.02 \
    --zero-min-bytes 20000
# and under pp (planner/plan_replay.c: a stage's segments, the schedule's
# visits): dp 2 x pp 2 interleaved (every gradient kept through the step,
# the tied wte gathered again for the head's gradient, then packed), and
# tp 2 x pp 2 with sp and selective recompute under 1F1B (dp 1: the
# first stage runs no forward after its first backward, the last does)
check 4 dp=2,tp=1,pp=2,sp=0,zero=3,recompute=none,micro_batch=1,schedule=interleaved,virtual_stages=2 \
    --pp 2 --zero 3 --grad-accum 2 --schedule interleaved --virtual-stages 2 --bucket-mb 0.01 \
    --zero-min-bytes 0
check 4 dp=1,tp=2,pp=2,sp=1,zero=3,recompute=selective,micro_batch=2,schedule=1f1b --pp 2 \
    --tp 2 --sp --recompute selective --zero 3 --grad-accum 2 --bucket-mb 0.01 --zero-min-bytes 0
echo "train_gpt_zero3_mp: ok"
