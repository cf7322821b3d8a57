#!/usr/bin/env bash
# Expert parallel on the device interface (ep_device_worker.c): ep 2 on 2
# ranks (ZeRO-1, on the data-parallel runtime and on the model-parallel
# one with the device as mp's) and ep 2 x dp 2 on 4 (ZeRO-3: the experts'
# shards and gathers too) train on the CPU device and on a device that
# counts its calls to the same losses and experts, bitwise; every ep buffer
# was made by the device, the dispatch's rows are written by the model's
# table and its memsets are the ones the docs state (docs/model.md, "The
# device interface").
set -euo pipefail
source "$(dirname "$0")/job_env.sh"
job_test_setup
source "$(dirname "$0")/ckpt_worker_env.sh"
export MSR_TIMEOUT=30
# run RANKS EP ZERO [mp]
run() {
    local ranks=$1 ep=$2 zero=$3
    ckpt_worker "$ranks" 120 ep_device_worker "$ep" "$zero" ${4:+"$4"} ||
        fail "$ranks ranks, ep $ep, ZeRO $zero: $(tail -20 "$work/log")"
    ! grep -q "FAIL" "$work/log" || fail "$ranks ranks: $(grep FAIL "$work/log")"
    grep -q "ok ep device" "$work/log" || fail "$ranks ranks: not ok: $(tail -20 "$work/log")"
    for ((r = 0; r < ranks; r++)); do
        said "$r" "ep buffers on the device: [1-9][0-9]*" "$ranks ranks"
        said "$r" "dispatch kept: [1-9][0-9]* through the table: [1-9][0-9]*, memsets: [1-9][0-9]*" "$ranks ranks"
        [[ $zero -lt 3 ]] || said "$r" "shard copies D2D: [1-9][0-9]*" "$ranks ranks, ZeRO-3"
    done
    grep -E "rank 0: " "$work/log"
}
run 2 2 1
run 2 2 1 mp
run 4 2 3
echo "ep_device: ok"
