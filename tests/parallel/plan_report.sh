#!/usr/bin/env bash
# The planner's runtime accounting against the runtime's own count: for
# 30 layouts of 4 ranks (dp, tp with and without sp, pp with each
# schedule, even and uneven splits of the layers, ZeRO 0-3 (ZeRO-3 with tp
# and sp too, and alone with recompute: its transient peak exact), the recompute
# modes, small buckets and replicated segments, context parallel alone and
# with tp and pp, the chunked head; Mixture-of-Experts with expert parallel, on the data-
# parallel path and with pp, tp, sp and cp), train_gpt
# --report runs
# under msrun, and every rank's
# parameter, gradient and optimizer bytes, dp shard, replicated elements, buckets, work
# space, activation peak and frame sizes (and a MoE model's experts and
# their work space) must equal plan_gpt --ranks's
# prediction to the byte; the runtime's temporary peak must not exceed the
# planner's replay of it (which lets no reduction finish before it must).
source "$(dirname "$0")/plan_report_lib.sh"

s=schedule
moe=()
check 4 dp=4,tp=1,pp=1,sp=0,zero=0,recompute=none,micro_batch=2
check 4 dp=4,tp=1,pp=1,sp=0,zero=3,recompute=none,micro_batch=2 --zero 3 --bucket-mb 0.02 \
    --zero-min-bytes 20000
check 4 dp=4,tp=1,pp=1,sp=0,zero=1,recompute=selective,micro_batch=1 --grad-accum 2 --zero 1 \
    --recompute selective --bucket-mb 0.01
check 4 dp=2,tp=2,pp=1,sp=1,zero=1,recompute=none,micro_batch=2 --tp 2 --sp --zero 1
check 4 dp=2,tp=2,pp=1,sp=0,zero=2,recompute=full,micro_batch=2 --tp 2 --zero 2 \
    --recompute full --bucket-mb 0.01
check 4 dp=1,tp=4,pp=1,sp=1,zero=0,recompute=selective,micro_batch=2 --tp 4 --sp \
    --recompute selective
check 6 dp=1,tp=1,pp=4,sp=0,zero=0,recompute=none,micro_batch=2,$s=1f1b --pp 4 --grad-accum 4
check 8 dp=1,tp=1,pp=4,sp=0,zero=0,recompute=full,micro_batch=1,$s=gpipe --pp 4 \
    --schedule gpipe --grad-accum 3 --recompute full
check 8 dp=2,tp=1,pp=2,sp=0,zero=2,recompute=none,micro_batch=2,$s=gpipe --pp 2 \
    --schedule gpipe --grad-accum 2 --zero 2 --bucket-mb 0.02
check 8 dp=1,tp=2,pp=2,sp=1,zero=1,recompute=selective,micro_batch=2,$s=interleaved,virtual_stages=2 \
    --tp 2 --pp 2 --sp --schedule interleaved --virtual-stages 2 --grad-accum 4 --zero 1 \
    --recompute selective
check 8 dp=2,tp=1,pp=2,sp=0,zero=1,recompute=none,micro_batch=1,$s=interleaved,virtual_stages=4 \
    --pp 2 --schedule interleaved --virtual-stages 4 --grad-accum 2 --zero 1 --bucket-mb 0.01 \
    --zero-min-bytes 0
check 8 dp=1,tp=1,pp=4,sp=0,zero=2,recompute=none,micro_batch=1,$s=interleaved,virtual_stages=2 \
    --pp 4 --schedule interleaved --virtual-stages 2 --grad-accum 8 --zero 2
check 4 dp=1,tp=2,pp=2,sp=1,zero=2,recompute=full,micro_batch=2,$s=gpipe --tp 2 --pp 2 --sp \
    --schedule gpipe --grad-accum 2 --zero 2 --recompute full --bucket-mb 0.005 \
    --zero-min-bytes 30000
# uneven splits of the layers (--pp-layers): the end stages lighter or
# heavier, 1F1B, GPipe and interleaved, with tp, sp, recompute and ZeRO
check 8 dp=1,tp=1,pp=4,sp=0,zero=0,recompute=none,micro_batch=2,$s=1f1b --pp 4 --grad-accum 4 \
    --pp-layers 1,3,3,1
check 8 dp=2,tp=1,pp=2,sp=0,zero=2,recompute=selective,micro_batch=1,$s=gpipe --pp 2 \
    --schedule gpipe --grad-accum 3 --zero 2 --recompute selective --bucket-mb 0.02 \
    --pp-layers 6,2
check 8 dp=1,tp=2,pp=2,sp=1,zero=1,recompute=none,micro_batch=2,$s=interleaved,virtual_stages=2 \
    --tp 2 --pp 2 --sp --schedule interleaved --virtual-stages 2 --grad-accum 4 --zero 1 \
    --pp-layers 1,3,3,1
check 10 dp=1,tp=1,pp=4,sp=0,zero=0,recompute=full,micro_batch=1,$s=interleaved,virtual_stages=2 \
    --pp 4 --schedule interleaved --virtual-stages 2 --grad-accum 4 --recompute full \
    --pp-layers 2,1,1,1,1,1,2,1
# ZeRO-3 in the model-parallel runtime: each tp slice sharded over dp,
# gathered around every forward and backward (sp, recompute, 1F1B's next
# forward beside a backward's buckets); one process with recompute runs
# that runtime alone, its transient peak exactly the planner's replay
check 4 dp=2,tp=2,pp=1,sp=1,zero=3,recompute=none,micro_batch=1 --tp 2 --sp --zero 3 \
    --grad-accum 2 --bucket-mb 0.01 --zero-min-bytes 0
check 4 dp=2,tp=2,pp=1,sp=0,zero=3,recompute=full,micro_batch=2,$s=gpipe --tp 2 --zero 3 \
    --schedule gpipe --grad-accum 2 --recompute full --bucket-mb 0.02 --zero-min-bytes 20000
one_peak dp=1,tp=1,pp=1,sp=0,zero=3,recompute=selective,micro_batch=2 --zero 3 \
    --recompute selective --grad-accum 2
one_peak dp=1,tp=1,pp=1,sp=0,zero=3,recompute=full,micro_batch=2,$s=gpipe --zero 3 \
    --recompute full --schedule gpipe --grad-accum 2
# context parallel (--cp): the ring's positions, its logsumexp in place of
# the probabilities, its buffers in the work space, dp over dp x cp
check 4 dp=2,tp=1,pp=1,cp=2,sp=0,zero=1,recompute=none,micro_batch=2 --cp 2 --zero 1 \
    --bucket-mb 0.02
check 4 dp=1,tp=1,pp=1,cp=4,sp=0,zero=2,recompute=selective,micro_batch=1 --cp 4 --zero 2 \
    --grad-accum 2 --recompute selective --bucket-mb 0.01
check 4 dp=1,tp=2,pp=1,cp=2,sp=1,zero=0,recompute=selective,micro_batch=2 --cp 2 --tp 2 --sp \
    --recompute selective
check 4 dp=1,tp=1,pp=2,cp=2,sp=0,zero=2,recompute=full,micro_batch=1,$s=1f1b --cp 2 --pp 2 \
    --grad-accum 2 --zero 2 --recompute full --bucket-mb 0.01
# the chunked head (--head-chunk): the model-parallel runtime even without
# model parallel, a chunk's logits in the work space, three numbers a row
# in the last stage's frames; chunks that do not divide V / tp
check 4 dp=4,tp=1,pp=1,sp=0,zero=0,recompute=none,micro_batch=2 --head-chunk 48
check 4 dp=2,tp=2,pp=1,sp=1,zero=1,recompute=selective,micro_batch=2 --tp 2 --sp --zero 1 \
    --recompute selective --head-chunk 100 --bucket-mb 0.01
check 6 dp=2,tp=1,pp=2,sp=0,zero=2,recompute=full,micro_batch=1,$s=1f1b --pp 2 --grad-accum 3 \
    --zero 2 --recompute full --head-chunk 255 --bucket-mb 0.01
# Mixture-of-Experts (train_gpt --experts): the blocks' routers in place of
# their MLPs, the experts E / ep a rank, their moments sharded over the
# ranks holding the same experts under ZeRO; every second block MoE
moe=(--experts 4 --top-k 2 --moe-every 2)
check 4 dp=4,tp=1,pp=1,sp=0,zero=0,recompute=none,micro_batch=2,ep=1
check 4 dp=4,tp=1,pp=1,sp=0,zero=1,recompute=none,micro_batch=2,ep=2 --ep 2 --zero 1 \
    --bucket-mb 0.01
check 4 dp=4,tp=1,pp=1,sp=0,zero=3,recompute=none,micro_batch=1,ep=4 --ep 4 --zero 3 \
    --grad-accum 2 --bucket-mb 0.02 --zero-min-bytes 20000
# ... and in the model-parallel runtime: a stage holds its own MoE blocks'
# experts, tp ranks split them (E / (ep tp) each) and keep the router
check 4 dp=2,tp=1,pp=2,sp=0,zero=1,recompute=none,micro_batch=1,ep=2,$s=1f1b --pp 2 --ep 2 \
    --grad-accum 2 --zero 1 --bucket-mb 0.01
check 4 dp=2,tp=2,pp=1,sp=1,zero=2,recompute=selective,micro_batch=2,ep=2 --tp 2 --sp --ep 2 \
    --zero 2 --recompute selective --bucket-mb 0.01
check 6 dp=1,tp=2,pp=2,sp=0,zero=0,recompute=full,micro_batch=1,$s=gpipe --tp 2 --pp 2 \
    --schedule gpipe --grad-accum 2 --recompute full
# ... and under cp: the experts replicated over cp too, their moments
# sharded over the dp / ep x cp ranks holding the same experts (rank
# dp_rank / ep x cp + cp_rank of the 4 here)
check 4 dp=2,tp=1,pp=1,cp=2,sp=0,zero=1,recompute=none,micro_batch=2,ep=1 --cp 2 --zero 1 \
    --bucket-mb 0.01
echo "ok: $checked layouts, every rank's count equals the plan"
