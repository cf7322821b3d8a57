#!/usr/bin/env bash
# train_gpt --offload params=disk:DIR with pipeline parallel (docs/model.md
# "Offload"): each stage keeps the blocks of its part in its file. pp 2
# under 1F1B, GPipe (with the block inputs offloaded too, under full
# recompute) and interleaved with two and three virtual stages (ZeRO 3 too),
# an uneven split, and
# dp 2 x pp 2 under ZeRO 1 and ZeRO 3 give bitwise the losses of the same
# layout without offload, every rank reading each of its blocks back once
# per forward, backward and update and writing it once per update, every
# read started ahead (a pass's first block while the stage waits for its
# input) and none given up; a pp 2 run stopped and
# resumed with the offload on then off and off then on ends as the run
# never stopped; no file is left.
set -euo pipefail
source "$(dirname "$0")/offload_env.sh"
job_prefix=offpp
offload_limit=90
# stats NAME N M C: each of the N ranks of NAME (4 steps, M micro-batches
# a step, C chunks) wrote each of its blocks B once at the start and once
# a step and read it back once per forward, backward and update, every
# read started ahead and none given up (a guess past a model chunk's
# end, where an interleaved schedule's next pass is often another
# chunk's); B from the rank's own line
stats() {
    local name=$1 n=$2 m=$3 c=$4 r line b w rd miss
    for ((r = 0; r < n; r++)); do
        line=$(grep "rank $r parameter offload:" "$work/$name.out") ||
            fail "$name: no parameter offload line for rank $r"
        read -r w rd miss <<<"$(sed -n 's/.*: \([0-9]*\) written, \([0-9]*\) read back, \([0-9]*\) not read ahead.*/\1 \2 \3/p' <<<"$line")"
        b=$((w / 5))
        [[ $b -ge 1 && $w -eq $((5 * b)) && $rd -eq $((4 * b * (2 * m + 1))) ]] ||
            fail "$name rank $r: $line"
        [[ $miss -eq 0 ]] || fail "$name rank $r: a block not read ahead: $line"
        [[ $line == *", 0 reads ahead given up;"* ]] ||
            fail "$name rank $r: a read ahead no pass took: $line"
    done
}
# same NAME N M C LAYOUT... -- ARGS...: the layout with and without the
# offload (ARGS after the layout's), bitwise, no file left
same() {
    local name=$1 n=$2 m=$3 c=$4
    shift 4
    local -a layout=()
    while [[ $# -gt 0 && $1 != -- ]]; do layout+=("$1") && shift; done
    shift
    offload_run "$name" "$n" "${layout[@]}"
    offload_run "$name-off" "$n" "${layout[@]}" "$@" --report
    offload_none_left "$name-off"
    [[ $(wc -l <"$work/$name-off.log") -eq 4 ]] || fail "$name-off: not 4 steps"
    cmp -s "$work/$name.log" "$work/$name-off.log" ||
        fail "$name with the offload differs: $(diff "$work/$name.log" "$work/$name-off.log" | head -4)"
    stats "$name-off" "$n" "$m" "$c"
}
same 1f1b 2 4 1 --pp 2 --global-batch 8 --micro-batch 2 --grad-accum 4 -- "${params[@]}"
same gpipe 2 4 1 --pp 2 --grad-accum 4 --schedule gpipe --recompute full --layers 6 \
    --pp-layers 4,2 -- --offload "$pdisk,activations=disk:$work/off"
same inter 2 4 2 --pp 2 --grad-accum 4 --schedule interleaved --virtual-stages 2 -- \
    "${params[@]}" --offload-io threads
# three chunks a rank of two blocks each: a chunk's last block is not the
# next one's pass reaches
same inter3 2 8 3 --pp 2 --layers 12 --micro-batch 1 --grad-accum 8 --schedule interleaved \
    --virtual-stages 3 -- "${params[@]}"
zsplit=(--dp 2 --pp 2 --bucket-mb 0.02 --zero-min-bytes 0)
same z1 4 2 1 "${zsplit[@]}" --zero 1 -- "${params[@]}"
same z3 4 2 1 "${zsplit[@]}" --zero 3 -- --offload "$pdisk,optimizer=disk:$work/off" \
    --offload-chunk 4096
# ZeRO 3's gathers read the shares in the schedule's order: three chunks
# a rank of two blocks each
same z3i 4 4 3 --dp 2 --pp 2 --layers 12 --global-batch 16 --zero 3 --zero-min-bytes 0 \
    --schedule interleaved --virtual-stages 3 -- "${params[@]}"
# the uneven split: stage 0 holds 4 blocks, stage 1 two
grep -q "rank 0 parameter offload: 20 written" "$work/gpipe-off.out" &&
    grep -q "rank 1 parameter offload: 10 written" "$work/gpipe-off.out" ||
    fail "gpipe: each stage should hold its own blocks: $(grep "parameter offload" "$work/gpipe-off.out")"

# stopped at step 2 and resumed with the offload on then off, off then on
offload_resume_both 1f1b --pp 2 --grad-accum 4
echo "offload: parameters under pp 2 (1F1B, GPipe, interleaved, ZeRO 1 and 3) bitwise equal"
