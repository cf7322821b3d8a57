#!/usr/bin/env bash
# The planner's count of what train_gpt --offload keeps resident against
# the runtime's own (issue 45 point 5): for each offload mode (the
# optimizer's moments, full recompute's block inputs, both; the blocks'
# parameters, alone, with the moments and under recompute, on one
# process and dp 2 under ZeRO 0, 1, 2 and 3, with the moments under
# ZeRO 0, 1, 2 and 3 too, tp 2 with and without sp, dp 2 x tp 2 with
# both, cp 2 alone, with dp 2 under ZeRO 1 and with tp 2 and sp) on one process,
# dp 2 under ZeRO 1, 2 and 3, tp 2 with sp and pp 2 under 1F1B, GPipe and
# interleaved; the gradient shard of ZeRO 2 and 3 beside the moments, with
# and without the blocks' parameters, on one process and dp 2, and in
# bf16; a MoE model's experts' moments beside the flat buffer's, and its
# blocks' parameters, of two sizes, and its experts' own, ZeRO 3's shares
# of them over replicas too),
# train_gpt --report runs under msrun and every
# rank's parameter, gradient and optimizer bytes, shard, buckets, work
# space, activation peak and frame sizes must equal plan_gpt --offload
# ... --ranks's to the byte; --offload-chunk at its bound 4096 and at a
# size above the quarter of a small shard.
source "$(dirname "$0")/plan_report_lib.sh"

s=schedule
opt() { plan_extra=(--offload optimizer "$@"); }
acts() { plan_extra=(--offload activations); }
both() { plan_extra=(--offload optimizer,activations); }
params() { plan_extra=(--offload params); }
pboth() { plan_extra=(--offload optimizer,params "$@"); }
P=(--offload "params=disk:$work")
PO=(--offload "params=disk:$work,optimizer=disk:$work")
O=(--offload "optimizer=disk:$work")
A=(--offload "activations=disk:$work" --recompute full)
B=(--offload "optimizer=disk:$work,activations=disk:$work" --recompute full)
grads() { plan_extra=(--offload optimizer,grads "$@"); }
gparams() { plan_extra=(--offload optimizer,params,grads "$@"); }
G=(--offload "optimizer=disk:$work,grads=disk:$work")
GP=(--offload "optimizer=disk:$work,params=disk:$work,grads=disk:$work")

# one process: the whole model (no recompute) and the model-parallel
# runtime (full recompute, the block inputs offloaded)
world=1
opt
check 4 dp=1,tp=1,pp=1,sp=0,zero=0,recompute=none,micro_batch=2 "${O[@]}"
opt --offload-chunk 4096
check 4 dp=1,tp=1,pp=1,sp=0,zero=0,recompute=none,micro_batch=2 "${O[@]}" --offload-chunk 4096
acts
check 4 dp=1,tp=1,pp=1,sp=0,zero=0,recompute=full,micro_batch=2 "${A[@]}" --grad-accum 2
both
check 3 dp=1,tp=1,pp=1,sp=0,zero=0,recompute=full,micro_batch=1 "${B[@]}"
# the blocks' parameters (ZeRO 0, no recompute)
params
check 4 dp=1,tp=1,pp=1,sp=0,zero=0,recompute=none,micro_batch=2 "${P[@]}"
# and the moments besides
pboth --offload-chunk 4096
check 3 dp=1,tp=1,pp=1,sp=0,zero=0,recompute=none,micro_batch=2 "${PO[@]}" --offload-chunk 4096
# under full recompute (the model-parallel runtime), with every offload
params
check 4 dp=1,tp=1,pp=1,sp=0,zero=0,recompute=full,micro_batch=2 "${P[@]}" --recompute full \
    --grad-accum 2
plan_extra=(--offload optimizer,activations,params)
check 3 dp=1,tp=1,pp=1,sp=0,zero=0,recompute=full,micro_batch=1 --recompute full \
    --offload "params=disk:$work,optimizer=disk:$work,activations=disk:$work"
# dp 2: the optimizer's shard under ZeRO 1, 2 and 3
world=2
opt
check 4 dp=2,tp=1,pp=1,sp=0,zero=1,recompute=none,micro_batch=2 "${O[@]}" --zero 1 \
    --bucket-mb 0.02
params
check 4 dp=2,tp=1,pp=1,sp=0,zero=0,recompute=none,micro_batch=1 "${P[@]}" --bucket-mb 0.02
pboth
check 4 dp=2,tp=1,pp=1,sp=0,zero=0,recompute=none,micro_batch=1 "${PO[@]}" --bucket-mb 0.02
params
check 4 dp=2,tp=1,pp=1,sp=0,zero=0,recompute=selective,micro_batch=1 "${P[@]}" \
    --recompute selective --bucket-mb 0.02
check 4 dp=2,tp=1,pp=1,sp=0,zero=1,recompute=none,micro_batch=1 "${P[@]}" --zero 1 \
    --bucket-mb 0.02 --zero-min-bytes 4096
check 4 dp=2,tp=1,pp=1,sp=0,zero=2,recompute=full,micro_batch=2 "${P[@]}" --zero 2 \
    --recompute full --bucket-mb 0.02 --zero-min-bytes 4096
# both at ZeRO 1 and 2: each store as alone, the moments of the shard
pboth
check 4 dp=2,tp=1,pp=1,sp=0,zero=1,recompute=none,micro_batch=1 "${PO[@]}" --zero 1 \
    --bucket-mb 0.02 --zero-min-bytes 0
pboth --offload-chunk 4096
check 4 dp=2,tp=1,pp=1,sp=0,zero=2,recompute=full,micro_batch=2 "${PO[@]}" --zero 2 \
    --recompute full --bucket-mb 0.02 --zero-min-bytes 4096 --offload-chunk 4096
opt --offload-chunk 8192
check 4 dp=2,tp=1,pp=1,sp=0,zero=3,recompute=none,micro_batch=1 "${O[@]}" --zero 3 \
    --offload-chunk 8192 --bucket-mb 0.02 --zero-min-bytes 20000
# ZeRO-3: each rank's share of each block in its file (the blocks sharded,
# and replicated by the default threshold), alone, with the moments and
# under full recompute
params
check 4 dp=2,tp=1,pp=1,sp=0,zero=3,recompute=none,micro_batch=1 "${P[@]}" --zero 3 \
    --bucket-mb 0.02 --zero-min-bytes 4096
check 4 dp=2,tp=1,pp=1,sp=0,zero=3,recompute=full,micro_batch=2 "${P[@]}" --zero 3 \
    --recompute full
pboth --offload-chunk 4096
check 4 dp=2,tp=1,pp=1,sp=0,zero=3,recompute=none,micro_batch=2 "${PO[@]}" --zero 3 \
    --bucket-mb 0.02 --zero-min-bytes 0 --offload-chunk 4096
both
check 4 dp=2,tp=1,pp=1,sp=0,zero=2,recompute=full,micro_batch=2 "${B[@]}" --zero 2 \
    --bucket-mb 0.01
# pp 2: each stage's part, 1F1B's and GPipe's frames, an uneven split
acts
check 4 dp=1,tp=1,pp=2,sp=0,zero=0,recompute=full,micro_batch=1,$s=1f1b --pp 2 \
    --grad-accum 4 "${A[@]}"
both
check 6 dp=1,tp=1,pp=2,sp=0,zero=0,recompute=full,micro_batch=2,$s=gpipe --pp 2 \
    --schedule gpipe --grad-accum 3 "${B[@]}" --pp-layers 4,2
# pp 2: each stage's blocks in its file (an uneven split; with dp 2
# under ZeRO 1 and 3)
params
check 6 dp=1,tp=1,pp=2,sp=0,zero=0,recompute=full,micro_batch=1,$s=1f1b --pp 2 \
    --grad-accum 4 "${P[@]}" --recompute full --pp-layers 4,2
world=4
check 4 dp=2,tp=1,pp=2,sp=0,zero=1,recompute=full,micro_batch=1,$s=1f1b --pp 2 \
    --grad-accum 2 "${P[@]}" --zero 1 --recompute full --bucket-mb 0.02 --zero-min-bytes 0
check 4 dp=2,tp=1,pp=2,sp=0,zero=3,recompute=full,micro_batch=1,$s=gpipe --pp 2 \
    --schedule gpipe --grad-accum 2 "${P[@]}" --zero 3 --recompute full --bucket-mb 0.02 \
    --zero-min-bytes 0
# tp 2: each rank's slices of the blocks in its file, with and without sp
world=2
params
check 4 dp=1,tp=2,pp=1,sp=0,zero=0,recompute=none,micro_batch=2 "${P[@]}" --tp 2
check 4 dp=1,tp=2,pp=1,sp=1,zero=0,recompute=full,micro_batch=2 "${P[@]}" --tp 2 --sp \
    --recompute full
# cp 2: each rank's whole blocks in its file, with ZeRO 1 and with tp 2
params
check 4 dp=1,tp=1,pp=1,cp=2,sp=0,zero=0,recompute=none,micro_batch=2 "${P[@]}" --cp 2
world=4
check 4 dp=2,tp=1,pp=1,cp=2,sp=0,zero=1,recompute=full,micro_batch=2 "${P[@]}" --cp 2 \
    --zero 1 --recompute full --bucket-mb 0.02 --zero-min-bytes 0
check 4 dp=1,tp=2,pp=1,cp=2,sp=1,zero=0,recompute=selective,micro_batch=2 "${P[@]}" --cp 2 \
    --tp 2 --sp --recompute selective
# four ranks: tp 2 with sp (a block input of B T / 2 positions), and the
# interleaved schedule's two chunks per rank
world=4
pboth
check 4 dp=2,tp=2,pp=1,sp=1,zero=1,recompute=none,micro_batch=2 "${PO[@]}" --tp 2 --sp --zero 1 \
    --bucket-mb 0.02 --zero-min-bytes 0
both
check 4 dp=2,tp=2,pp=1,sp=1,zero=1,recompute=full,micro_batch=2 --tp 2 --sp --zero 1 "${B[@]}"
acts
check 4 dp=1,tp=2,pp=2,sp=0,zero=0,recompute=full,micro_batch=1,$s=interleaved,virtual_stages=2 \
    --tp 2 --pp 2 --schedule interleaved --virtual-stages 2 --grad-accum 2 "${A[@]}"
# the gradient shard on disk beside the moments (ZeRO 2 and 3, data
# parallel alone): one chunk (the default, above a small shard) and many
# (4096 and 8192 bytes), with and without the blocks' parameters
world=1
grads
check 4 dp=1,tp=1,pp=1,sp=0,zero=2,recompute=none,micro_batch=2 "${G[@]}" --zero 2 --grad-accum 2
grads --offload-chunk 4096
check 3 dp=1,tp=1,pp=1,sp=0,zero=3,recompute=none,micro_batch=1 "${G[@]}" --zero 3 \
    --offload-chunk 4096
gparams --offload-chunk 8192
check 4 dp=1,tp=1,pp=1,sp=0,zero=2,recompute=full,micro_batch=2 "${GP[@]}" --zero 2 \
    --recompute full --offload-chunk 8192
world=2
grads --offload-chunk 4096
check 4 dp=2,tp=1,pp=1,sp=0,zero=2,recompute=none,micro_batch=1 "${G[@]}" --zero 2 \
    --bucket-mb 0.02 --zero-min-bytes 4096 --offload-chunk 4096 --grad-accum 2
grads
check 4 dp=2,tp=1,pp=1,sp=0,zero=3,recompute=full,micro_batch=2 "${G[@]}" --zero 3 \
    --recompute full --bucket-mb 0.02 --zero-min-bytes 0
gparams --offload-chunk 8192
check 4 dp=2,tp=1,pp=1,sp=0,zero=3,recompute=none,micro_batch=1 "${GP[@]}" --zero 3 \
    --bucket-mb 0.02 --zero-min-bytes 4096 --offload-chunk 8192
gparams
check 4 dp=2,tp=1,pp=1,sp=0,zero=2,recompute=none,micro_batch=2 "${GP[@]}" --zero 2 \
    --bucket-mb 0.02
# bf16: the products' operands change, not the shard or its store (the
# fp32 parameters stay the master weights)
grads --offload-chunk 4096 --precision bf16-runtime
check 4 dp=2,tp=1,pp=1,sp=0,zero=3,recompute=none,micro_batch=1 "${G[@]}" --zero 3 \
    --precision bf16 --bucket-mb 0.02 --zero-min-bytes 4096 --offload-chunk 4096
# a MoE model: the experts' moments in a file of their own beside the
# flat buffer's (one process; dp 2 under ZeRO 1, the block of each
# replica; ZeRO 3's per-block shards; ep 2 x dp 2; pp 2, a MoE block a
# stage)
moe=(--experts 4 --top-k 2 --moe-every 2)
world=1
opt
check 4 dp=1,tp=1,pp=1,sp=0,zero=0,recompute=none,micro_batch=2,ep=1 "${O[@]}"
world=2
opt --offload-chunk 4096
check 4 dp=2,tp=1,pp=1,sp=0,zero=1,recompute=none,micro_batch=1,ep=1 "${O[@]}" --zero 1 \
    --bucket-mb 0.02 --offload-chunk 4096
check 4 dp=2,tp=1,pp=1,sp=0,zero=3,recompute=none,micro_batch=1,ep=1 "${O[@]}" --zero 3 \
    --bucket-mb 0.02 --zero-min-bytes 0 --offload-chunk 4096
check 4 dp=1,tp=1,pp=2,sp=0,zero=0,recompute=none,micro_batch=1,ep=1,$s=1f1b "${O[@]}" \
    --pp 2 --grad-accum 2 --offload-chunk 4096
world=4
opt
check 4 dp=4,tp=1,pp=1,sp=0,zero=1,recompute=none,micro_batch=1,ep=2 "${O[@]}" --ep 2 \
    --zero 1 --bucket-mb 0.02
# and its blocks' parameters, of two sizes in one store of the larger's
# (one process; ZeRO 3's shares; ep 2 x dp 2 with the moments; tp 2 with
# sp; pp 2, a stage's MoE block smaller than its dense one; pp 4, a stage
# of a MoE block alone)
world=1
params
check 4 dp=1,tp=1,pp=1,sp=0,zero=0,recompute=none,micro_batch=2,ep=1 "${P[@]}"
world=2
check 4 dp=2,tp=1,pp=1,sp=0,zero=3,recompute=none,micro_batch=1,ep=1 "${P[@]}" --zero 3 \
    --bucket-mb 0.02 --zero-min-bytes 0
check 4 dp=1,tp=2,pp=1,sp=1,zero=0,recompute=none,micro_batch=2,ep=1 "${P[@]}" --tp 2 --sp
check 4 dp=1,tp=1,pp=2,sp=0,zero=0,recompute=none,micro_batch=1,ep=1,$s=1f1b "${P[@]}" \
    --pp 2 --grad-accum 2
world=4
check 4 dp=1,tp=1,pp=4,sp=0,zero=0,recompute=none,micro_batch=1,ep=1,$s=1f1b "${P[@]}" \
    --pp 4 --grad-accum 4
pboth --offload-chunk 4096
check 4 dp=4,tp=1,pp=1,sp=0,zero=1,recompute=none,micro_batch=1,ep=2 "${PO[@]}" --ep 2 \
    --zero 1 --bucket-mb 0.02 --offload-chunk 4096
# ZeRO 1 and 3 with 2 replicas of the experts: their blocks in their
# file (ZeRO 1: gathered a block at a time, the gradients reduced in
# place; ZeRO 3: each rank's shares), with the moments in theirs too
world=2
# (3 MoE blocks: a replica's block of the experts is 1.5 MoE blocks, so
# the gather's part is the MoE block's)
params
check 6 dp=2,tp=1,pp=1,sp=0,zero=1,recompute=none,micro_batch=1,ep=1 "${P[@]}" --zero 1 \
    --bucket-mb 0.02
pboth --offload-chunk 4096
check 4 dp=2,tp=1,pp=1,sp=0,zero=3,recompute=none,micro_batch=1,ep=1 "${PO[@]}" --zero 3 \
    --bucket-mb 0.02 --zero-min-bytes 0 --offload-chunk 4096
# and its experts' gradients in a file of their own under grads=disk:
# where no replica sums them (one process at ZeRO 2; ep 2 x dp 2 at
# ZeRO 2), with replicas at ZeRO 2 (dp 2: each block's owned parts
# reduced in it) and ZeRO 3's shares of the replicas' sums (dp 2)
world=1
gparams --offload-chunk 4096
check 4 dp=1,tp=1,pp=1,sp=0,zero=2,recompute=none,micro_batch=2,ep=1 "${GP[@]}" --zero 2 \
    --offload-chunk 4096
world=2
check 4 dp=2,tp=1,pp=1,sp=0,zero=2,recompute=none,micro_batch=1,ep=2 "${GP[@]}" --ep 2 \
    --zero 2 --bucket-mb 0.02 --offload-chunk 4096
check 4 dp=2,tp=1,pp=1,sp=0,zero=2,recompute=none,micro_batch=1,ep=1 "${GP[@]}" --zero 2 \
    --bucket-mb 0.02 --offload-chunk 4096
check 4 dp=2,tp=1,pp=1,sp=0,zero=3,recompute=none,micro_batch=2,ep=1 "${GP[@]}" --zero 3 \
    --bucket-mb 0.02 --zero-min-bytes 0 --offload-chunk 4096
echo "ok: $checked layouts, every rank's count equals the plan"
