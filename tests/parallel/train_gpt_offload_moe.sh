#!/usr/bin/env bash
# train_gpt --offload params=disk:DIR with a MoE model (docs/model.md
# "Offload"): its blocks are of two sizes (a MoE block has the router in
# place of the MLP; its experts stay in the experts' store, resident), so
# the store's blocks are the larger's and a dense block's fill part of
# one. Every layout gives bitwise the losses of the same layout without
# offload, each rank reading every block back ahead of its forward, its
# backward and its update: one process (with the moments offloaded too,
# 4 KiB chunks: the chunks' cursor walks blocks of both sizes), dp 2
# under ZeRO 1 (with the moments too) and ZeRO 3 (each block's share),
# ep 2 among dp 2, tp 2 x dp 2 with sp, cp 2, pp 2 and bf16; fewer parameter
# bytes resident; no file left; stopped and resumed with the offload on
# then off and off then on, each as the run never stopped, the restore
# holding at most two blocks' bytes.
set -euo pipefail
source "$(dirname "$0")/offload_env.sh"
job_prefix=offmoe
offload_limit=90
small+=(--experts 4 --top-k 2 --moe-every 2)
# pbytes NAME: rank 0's parameter bytes in run NAME's --report
pbytes() { sed -n 's/.*rank 0 zero [0-3]: params \([0-9]*\) .*/\1/p' "$work/$1.out"; }
# same NAME N M LAYOUT... -- ARGS...: offload_same (M 0: a pipeline's
# stages, 2 blocks each, not counted)
same() {
    offload_same "$@"
    echo "$1: bitwise equal"
}
# fewer parameter bytes resident with 8 blocks (with 4 of these sizes the
# store's 3 buffers of the larger block, 4 KiB pages each, hold as many
# bytes as the blocks: plan_report_offload checks those to the byte)
offload_run big 1 --layers 8 --steps 1 --report
offload_run big-off 1 --layers 8 --steps 1 --report "${params[@]}"
a=$(pbytes big) b=$(pbytes big-off)
[[ $a =~ ^[0-9]+$ && $b =~ ^[0-9]+$ && $b -lt $a ]] ||
    fail "8 blocks: rank 0's parameters: '$b' bytes offloaded, '$a' without"
echo "8 blocks: rank 0's parameters $a bytes resident without, $b with"
PO=(--offload "$pdisk,optimizer=disk:$work/off" --offload-chunk 4096)
same one 1 4 -- "${params[@]}"
same one-po 1 4 -- "${PO[@]}"
same zero1 2 2 --dp 2 --zero 1 --bucket-mb 0.02 -- "${params[@]}"
same zero1-po 2 2 --dp 2 --zero 1 --bucket-mb 0.02 -- "${PO[@]}"
same zero3 2 2 --dp 2 --zero 3 --bucket-mb 0.02 --zero-min-bytes 0 -- "${params[@]}"
same ep 2 2 --dp 2 --ep 2 --zero 1 -- "${params[@]}"
same tp 4 2 --tp 2 --sp --dp 2 -- "${params[@]}"
same cp 2 4 --cp 2 -- "${params[@]}"
same pp 2 0 --pp 2 -- "${params[@]}"
same bf16 2 2 --dp 2 --precision bf16 -- "${params[@]}"

# stopped at step 2, resumed on then off and off then on (ZeRO 1): as the
# run never stopped; the on-off run's restore held at most two blocks
offload_resume_both zero1 --dp 2 --zero 1 --bucket-mb 0.02 --report
offload_restore_bounded ck-off-on 2
echo "offload: a MoE model's blocks bitwise equal without it (one, ZeRO 1 and 3, ep, tp, cp, pp, bf16; resumed)"
