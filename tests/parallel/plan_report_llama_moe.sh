#!/usr/bin/env bash
# The planner's runtime accounting for train_gpt --arch llama with
# experts (Mixtral's SwiGLU experts, 3 C F floats each, their work space's
# fc outputs 2F wide) against the runtime's own count: a router in place
# of a MoE block's w1, w3 and w2, the experts E / (ep tp) a rank, their
# moments sharded over the ranks holding the same experts under ZeRO;
# dp 4 with ep 2 and ZeRO 1, tp 2 with sp x ep 2 with ZeRO 2 and
# selective recompute, and in bf16 products pp 2 x ep 2 with every token
# to every expert (an expert's gate and up, N x 2F, the first stage's
# largest product): train_gpt --report's counts of every rank, experts
# and operand scratch included, must equal plan_gpt --ranks's to the byte.
source "$(dirname "$0")/plan_report_lib.sh"

s=schedule
llama=(--arch llama --ffn 48 --kv-heads 2)
plan_extra=("${llama[@]}")
train_extra=("${llama[@]}")
moe=(--experts 4 --top-k 2 --moe-every 2)
check 4 dp=4,tp=1,pp=1,sp=0,zero=1,recompute=none,micro_batch=2,ep=2 --ep 2 --zero 1 \
    --bucket-mb 0.01
check 4 dp=2,tp=2,pp=1,sp=1,zero=2,recompute=selective,micro_batch=2,ep=2 --tp 2 --sp --ep 2 \
    --zero 2 --recompute selective --bucket-mb 0.01
plan_extra=("${llama[@]}" --precision bf16-runtime)
train_extra=("${llama[@]}" --precision bf16)
moe=(--experts 4 --top-k 4 --moe-every 1)
check 4 dp=2,tp=1,pp=2,sp=0,zero=0,recompute=none,micro_batch=2,ep=2,$s=1f1b --pp 2 --ep 2 \
    --grad-accum 2
echo "ok: $checked layouts of a Llama with experts, every rank's count equals the plan"
