#!/usr/bin/env bash
# train_gpt --offload params=disk:D1,optimizer=disk:D2 under ZeRO 1 and 2
# (docs/model.md "Offload"): dp 2, the units cut across the blocks; the
# moments' chunks (4 KiB: a block spans many, a chunk several units; by
# default: one spans every block) reach the blocks in the shard's order,
# each block gathered from the other rank and written back as the chunks
# move past it; the losses bitwise those without offload, every block read
# ahead, no file left; stopped and resumed with both on, with both off
# after, and with both on after a plain start, each the run never stopped;
# a resume with the parameters offloaded holds about two blocks of them at
# once (the block its pieces fill, the gather's buffer), never the whole
# flat buffer.
set -euo pipefail
source "$(dirname "$0")/offload_env.sh"
job_prefix=offzero
small+=(--dp 2 --bucket-mb 0.02)
both=(--offload "$pdisk,optimizer=disk:$work/off")
# run NAME ARGS...: a 2-rank job writing its losses to $work/NAME.log, no
# file left
run() {
    offload_run "$1" 2 "${@:2}"
    offload_none_left "$1"
}
# equal NAME REF: NAME's 4 losses are REF's, bitwise
equal() {
    [[ $(wc -l <"$work/$1.log") -eq 4 ]] || fail "$1: not 4 steps"
    cmp -s "$work/$2.log" "$work/$1.log" ||
        fail "$1 differs from $2: $(diff "$work/$2.log" "$work/$1.log" | head -4)"
}
# both ranks read each of the 4 blocks back once per forward and backward
# of each of 2 micro-batches and once per update, 4 steps, all read ahead
read_ahead() { offload_read_ahead "$1" 2 2; }
# ZeRO 1 shards every unit, the norms' too (the final norm's after the
# blocks, gathered at the end); ZeRO 2 the units of 4 KiB and more
z1=(--zero 1 --zero-min-bytes 0)
z2=(--zero 2 --zero-min-bytes 4096 --recompute selective)
run z1 "${z1[@]}"
run z1-both "${z1[@]}" "${both[@]}" --offload-chunk 4096 --offload-io threads --report
equal z1-both z1
read_ahead z1-both
grep -q "rank 1 zero 1: .*(shard [0-9]* of [0-9]* elements" "$work/z1-both.out" ||
    fail "z1-both: no shard in the report: $(grep "zero 1" "$work/z1-both.out")"
run z2 "${z2[@]}"
run z2-both "${z2[@]}" "${both[@]}" --report
equal z2-both z2
read_ahead z2-both
run z2-both-4k "${z2[@]}" "${both[@]}" --offload-chunk 4096
equal z2-both-4k z2

# stopped at step 2 and resumed: both on throughout (ZeRO 1), both on then
# off and off then on (ZeRO 2): the moments and the blocks travel through
# the checkpoint
for how in z1:both-both z2:both-off z2:off-both; do
    zero=${how%%:*} mode=${how#*:} before=() after=()
    [[ $zero == z1 ]] && before=("${z1[@]}") after=("${z1[@]}")
    [[ $zero == z2 ]] && before=("${z2[@]}") after=("${z2[@]}")
    [[ $mode != both-* ]] || before+=("${both[@]}" --offload-chunk 4096)
    [[ $mode != *-both ]] || after+=("${both[@]}" --report)
    rm -rf "$work/ck"
    run "ck-$zero-$mode" --steps 2 --ckpt-every 2 --ckpt-dir "$work/ck" "${before[@]}"
    run "ck-$zero-$mode" --ckpt-every 2 --ckpt-dir "$work/ck" --resume "${after[@]}"
    grep -q "resumed from step 2" "$work/ck-$zero-$mode.out" ||
        fail "$how: no resume: $(tail -5 "$work/ck-$zero-$mode.out")"
    equal "ck-$zero-$mode" "$zero"
    [[ $mode != *-both ]] || offload_restore_bounded "ck-$zero-$mode" 2
done
echo "offload: both at ZeRO 1 and 2 bitwise equal without them (4 KiB and default chunks, resumed)"
