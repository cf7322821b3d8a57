#!/usr/bin/env bash
# train_gpt --offload params=disk:DIR with a MoE model (docs/model.md
# "Offload"): its blocks are of two sizes (a MoE block has the router in
# place of the MLP; its experts are apart, in a file of their own (under
# ZeRO 3 with replicas each rank's shares of them)), so the store's
# blocks are the larger's and a dense block's fill part of one. Every layout gives bitwise the losses of the same layout without
# offload, each rank reading every block back ahead of its forward, its
# backward and its update: one process (with the moments offloaded too,
# 4 KiB chunks: the chunks' cursor walks blocks of both sizes), dp 2
# under ZeRO 1 (with the moments too) and ZeRO 3 (each block's share),
# ep 2 among dp 2, tp 2 x dp 2 with sp, cp 2, pp 2 (interleaved too, and
# under ZeRO 3 over replicas: every read ahead, none given up) and bf16,
# and with
# grads=disk ZeRO 2 and 3 (dp 2, and ZeRO 2 over 4 replicas); fewer parameter
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
# the experts' own file: a block of the experts per MoE block, 3 of the 4
# buffered (4 KiB pages) and a CRC and a flag each: fewer bytes than the
# store; each of the 4 blocks read once a pass (4 micro-batches) and once
# in the update, all ahead
ebytes() { sed -n "s/.*rank 0 experts: .* params \([0-9]*\) grads.*/\1/p" "$work/$1.out"; }
# fewer_experts NAME WHAT COUNTS: run NAME-off keeps fewer bytes of the
# experts' parameters on rank 0 than run NAME, whose file's COUNTS
# ("W written, R read back") it reports, every read ahead
fewer_experts() {
    local a b
    a=$(ebytes "$1") b=$(ebytes "$1-off")
    [[ $a =~ ^[0-9]+$ && $b =~ ^[0-9]+$ && $b -lt $a ]] ||
        fail "$1: rank 0's $2: '$b' bytes offloaded, '$a' without"
    grep -q "rank 0 experts' parameter offload: $3, 0 not read ahead" "$work/$1-off.out" ||
        fail "$1-off: the $2: $(grep "experts'" "$work/$1-off.out")"
    echo "$1: rank 0's $2 $a bytes resident without, $b with"
}
fewer_experts big "experts' parameters" "8 written, 36 read back"
PO=(--offload "$pdisk,optimizer=disk:$work/off" --offload-chunk 4096)
same one 1 4 -- "${params[@]}"
same one-po 1 4 -- "${PO[@]}"
same zero1 2 2 --dp 2 --zero 1 --bucket-mb 0.02 -- "${params[@]}"
same zero1-po 2 2 --dp 2 --zero 1 --bucket-mb 0.02 -- "${PO[@]}"
same zero3 2 2 --dp 2 --zero 3 --bucket-mb 0.02 --zero-min-bytes 0 -- "${params[@]}"
# ZeRO 3 over 2 replicas: each rank's shares of the experts in their
# file, each of the 2 blocks' read for the step's first gather (the two
# gathers' slots keep both after it) and by the update, all ahead
lines=$(grep -c "rank [01] experts' parameter offload: 10 written, 16 read back, 0 not read ahead" \
    "$work/zero3-off.out" || true)
[[ $lines -eq 2 ]] || fail "zero3-off: the experts' shares: $(grep "experts'" "$work/zero3-off.out")"
same ep 2 2 --dp 2 --ep 2 --zero 1 -- "${params[@]}"
same tp 4 2 --tp 2 --sp --dp 2 -- "${params[@]}"
same cp 2 4 --cp 2 -- "${params[@]}"
same pp 2 0 --pp 2 -- "${params[@]}"
# interleaved, two chunks a rank of 3 blocks: rank 1's chunks each end in
# a MoE block whose next is the other chunk's, which the next pass is
# often not; every read of both files ahead, none given up
same inter 2 0 --pp 2 --layers 12 --micro-batch 1 --schedule interleaved --virtual-stages 2 -- \
    "${params[@]}"
# ahead() NAME N: both files of the N ranks of run NAME read every block
# ahead and gave up no read
ahead() {
    [[ $(grep -c "parameter offload: .* 0 not read ahead, 0 reads ahead given up;" \
        "$work/$1-off.out") -eq $((2 * $2)) ]] ||
        fail "$1-off: reads given up or not ahead: $(grep "parameter offload" "$work/$1-off.out")"
}
ahead inter 2
# and the experts' shares over 2 replicas under ZeRO 3, read for their
# gathers (three chunks a rank, two MoE blocks each)
same inter-z3 4 0 --dp 2 --pp 2 --layers 12 --moe-every 1 --global-batch 16 --zero 3 \
    --schedule interleaved --virtual-stages 3 -- "${params[@]}"
ahead inter-z3 4
same bf16 2 2 --dp 2 --precision bf16 -- "${params[@]}"

# stopped at step 2, resumed on then off and off then on (ZeRO 1): as the
# run never stopped; the on-off run's restore held at most two blocks
offload_resume_both zero1 --dp 2 --zero 1 --bucket-mb 0.02 --report
offload_restore_bounded ck-off-on 2
# ZeRO 1 over 2 replicas: the experts in their file too (each block read
# for each pass and by the update, whose walk gathers the other replica's
# owned elements into it), restored into it (above) and gathered after;
# ep 2 among dp 2 has no replicas: its experts in their file, saved from
# it and restored into it
lines=$(grep -c "rank [01] experts' parameter offload: 10 written, 40 read back, 0 not read ahead" \
    "$work/zero1-off.out" || true)
[[ $lines -eq 2 ]] || fail "zero1-off: the experts' blocks: $(grep "experts'" "$work/zero1-off.out")"
grep -q "rank 1 experts' parameter offload: 10 written, .* 0 not read ahead" "$work/ep-off.out" ||
    fail "ep-off: the experts' blocks: $(grep "experts'" "$work/ep-off.out")"
offload_resume_both ep --dp 2 --ep 2 --zero 1
# ZeRO 3's shares, with 8 blocks: fewer bytes than the shards, and a
# pass's blocks past the two gathered read ahead where it turns (4 MoE
# blocks, 2 micro-batches: 4 + 2 + 2 + 2 read for the passes, 4 for the
# update)
z3=(--dp 2 --zero 3 --zero-min-bytes 0 --layers 8 --steps 1 --report)
offload_run z3big 2 "${z3[@]}"
offload_run z3big-off 2 "${z3[@]}" "${params[@]}"
fewer_experts z3big "experts' shares" "8 written, 14 read back"
# and ZeRO 1's whole blocks over 2 replicas (4 + 4 read a micro-batch, 4
# by the update)
z1=(--dp 2 --zero 1 --layers 8 --steps 1 --report)
offload_run z1big 2 "${z1[@]}"
offload_run z1big-off 2 "${z1[@]}" "${params[@]}"
fewer_experts z1big "experts' parameters over replicas" "8 written, 20 read back"
# 3 MoE blocks over 2 replicas: rank 1's block of the experts starts
# inside the second, whose parts the update's gather puts in place
same z1odd 2 0 --dp 2 --zero 1 --layers 6 -- "${params[@]}"
# stopped and resumed with the shares in their file, on then off and off
# then on, and saved by a thread's reads with the moments in theirs too
offload_resume_both zero3 --dp 2 --zero 3 --bucket-mb 0.02 --zero-min-bytes 0
rm -rf "$work/ck" "$work/ck-z3.log"
offload_run ck-z3 2 --dp 2 --zero 3 --bucket-mb 0.02 --zero-min-bytes 0 "${PO[@]}" --steps 2 \
    --ckpt-every 1 --ckpt-async --ckpt-dir "$work/ck"
offload_run ck-z3 2 --dp 2 --zero 3 --bucket-mb 0.02 --zero-min-bytes 0 "${PO[@]}" \
    --ckpt-every 2 --ckpt-dir "$work/ck" --resume
cmp -s "$work/zero3.log" "$work/ck-z3.log" ||
    fail "ZeRO 3 resumed from an async save: $(diff "$work/zero3.log" "$work/ck-z3.log" | head -4)"
# the experts' moments in their file too, saved a thread's reads from the
# files while the next step computes
offload_run ep-po 2 --dp 2 --ep 2 "${PO[@]}"
cmp -s "$work/ep.log" "$work/ep-po.log" || fail "ep with the moments offloaded too differs"
rm -rf "$work/ck"
offload_run ck-async 2 --dp 2 --ep 2 "${PO[@]}" --steps 2 --ckpt-every 1 --ckpt-async \
    --ckpt-dir "$work/ck"
offload_run ck-async 2 --dp 2 --ep 2 --ckpt-every 1 --ckpt-dir "$work/ck" --resume
cmp -s "$work/ep.log" "$work/ck-async.log" ||
    fail "resumed from an async save: $(diff "$work/ep.log" "$work/ck-async.log" | head -4)"
# under grads=disk too (ZeRO 2) the experts' gradients go to a file of
# their own: each block read and written back around each backward, read
# by the norm and the update, all read ahead; with replicas (ep 1 of dp
# 2) the norm's read is the step's reduce of each block's owned parts
# into their owner's copy, which writes back the block a rank owns a
# part of (1 of the 2 here), the only one its update reads
G=(--offload "$pdisk,optimizer=disk:$work/off,grads=disk:$work/off" --offload-chunk 4096)
same one-z2 1 4 --zero 2 -- "${G[@]}"
same ep-z2 2 2 --dp 2 --ep 2 --zero 2 -- "${G[@]}"
grep -q "rank 0 experts' gradient offload: 18 written, 32 read back, 0 not read ahead" \
    "$work/ep-z2-off.out" ||
    fail "ep-z2-off: the experts' gradients: $(grep "experts'" "$work/ep-z2-off.out")"
same z2 2 2 --dp 2 --zero 2 --bucket-mb 0.02 -- "${G[@]}"
grep -q "rank 1 experts' gradient offload: 22 written, 28 read back, 0 not read ahead" \
    "$work/z2-off.out" ||
    fail "z2-off: the experts' gradients: $(grep "experts'" "$work/z2-off.out")"
# 4 replicas: each block summed as the reduce-scatter without offload
# sums it (in rank order on one node: one allreduce a block). A reduce to
# each part's owner, as before, fails here: the parts are above the
# shared-memory limit, where its tiles would fold in rank order too, but
# its tree, forced, stands in for smaller parts and other nodes, and sums
# ((0 + 1) + (2 + 3)): another rounding
MSR_COMM_ALGO_REDUCE=binomial same z2-4 4 1 --dp 4 --zero 2 --bucket-mb 0.02 -- "${G[@]}"
rm -rf "$work/ck" "$work/ck-z2g.log"
offload_run ck-z2g 2 --dp 2 --zero 2 --bucket-mb 0.02 "${G[@]}" --steps 2 --ckpt-every 2 \
    --ckpt-dir "$work/ck"
offload_run ck-z2g 2 --dp 2 --zero 2 --bucket-mb 0.02 "${G[@]}" --ckpt-every 2 \
    --ckpt-dir "$work/ck" --resume
cmp -s "$work/z2-off.log" "$work/ck-z2g.log" ||
    fail "ZeRO 2 resumed with the experts' gradients in their file: $(diff "$work/z2-off.log" "$work/ck-z2g.log" | head -4)"
# and ZeRO 3's shares of the replicas' sums are each rank's own: each
# MoE block's share read, added to and written back after the block's
# reduce-scatter, read by the norm and the update, all read ahead;
# stopped and resumed so
z3g=(--dp 2 --zero 3 --bucket-mb 0.02 --zero-min-bytes 0 "${G[@]}")
same z3g 2 2 --dp 2 --zero 3 --bucket-mb 0.02 --zero-min-bytes 0 -- "${G[@]}"
grep -q "rank 1 experts' gradient offload: 18 written, 32 read back, 0 not read ahead" \
    "$work/z3g-off.out" ||
    fail "z3g-off: the experts' gradients: $(grep "experts'" "$work/z3g-off.out")"
rm -rf "$work/ck" "$work/ck-z3g.log"
offload_run ck-z3g 2 "${z3g[@]}" --steps 2 --ckpt-every 2 --ckpt-dir "$work/ck"
offload_run ck-z3g 2 "${z3g[@]}" --ckpt-every 2 --ckpt-dir "$work/ck" --resume
cmp -s "$work/z3g-off.log" "$work/ck-z3g.log" ||
    fail "ZeRO 3 resumed with the experts' gradients in their file: $(diff "$work/z3g-off.log" "$work/ck-z3g.log" | head -4)"
rm -rf "$work/ck" "$work/ck-g.log"
offload_run ck-g 2 --dp 2 --ep 2 --zero 2 "${G[@]}" --steps 2 --ckpt-every 2 --ckpt-dir "$work/ck"
offload_run ck-g 2 --dp 2 --ep 2 --zero 2 "${G[@]}" --ckpt-every 2 --ckpt-dir "$work/ck" --resume
cmp -s "$work/ep-z2.log" "$work/ck-g.log" ||
    fail "resumed with the experts' gradients in their file: $(diff "$work/ep-z2.log" "$work/ck-g.log" | head -4)"
# a block of the experts longer than a checkpoint's piece (2^20 floats:
# 8 experts of 128 channels, 1,053,696) is saved in two pieces, the
# second from inside the block, and restored so
rm -rf "$work/ck" "$work/pc.log" "$work/pc-ck.log"
pc=(--layers 2 --channels 128 --heads 4 --experts 8 --moe-every 2 --global-batch 2 "${params[@]}")
offload_run pc m1 "${pc[@]}"
offload_run pc-ck m1 "${pc[@]}" --steps 2 --ckpt-every 2 --ckpt-dir "$work/ck"
offload_run pc-ck m1 "${pc[@]}" --ckpt-every 2 --ckpt-dir "$work/ck" --resume
cmp -s "$work/pc.log" "$work/pc-ck.log" ||
    fail "a block of the experts in two pieces: $(diff "$work/pc.log" "$work/pc-ck.log" | head -4)"
# --export-safetensors and --init-from read and write the blocks in their
# files: the same file and the same losses as without the offload
offload_export_init ep 2 --dp 2 --ep 2
offload_export_init z3 2 --dp 2 --zero 3 --zero-min-bytes 0
offload_export_init z1 2 --dp 2 --zero 1
# a block of the experts changed underneath while the run goes on: the
# pass that reads it stops the run naming the file and the block (4
# experts of 4 channels fit a 4 KiB slot of the file)
scribble "$work/off" experts-params block 1 "${small[@]}" --channels 4 --heads 1 \
    --moe-every 1 --steps 1000000 --offload "$pdisk"
echo "offload: a MoE model's blocks and experts bitwise equal without it (one, ZeRO 1 and 3, ep, tp, cp, pp, bf16; resumed, async, exported, initialised; the experts over replicas under ZeRO 1 and 3 too)"
