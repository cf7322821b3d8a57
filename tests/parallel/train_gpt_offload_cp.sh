#!/usr/bin/env bash
# train_gpt --offload params=disk:DIR with context parallel (docs/model.md
# "Offload"): each cp rank keeps its whole blocks in its file and computes
# on its own positions; cp 2, tp 2 x cp 2 with sp, and dp 2 x cp 2 under
# ZeRO 2 and full recompute give bitwise the losses of the same layout
# without offload, every rank reading each block back ahead of its
# forward, backward and update; no file is left.
set -euo pipefail
source "$(dirname "$0")/offload_env.sh"
job_prefix=offcp
offload_limit=90
small=(--layers 4 --channels 32 --heads 4 --seq 16 --micro-batch 2 --global-batch 8 --steps 4)
params=(--offload "params=disk:$work/off")
# same NAME N M LAYOUT... -- ARGS...: the layout with and without the
# offload (ARGS after the layout's), bitwise, each of the N ranks reading
# each block back ahead (M micro-batches a step)
same() {
    local name=$1 n=$2 m=$3
    shift 3
    local -a layout=()
    while [[ $# -gt 0 && $1 != -- ]]; do layout+=("$1") && shift; done
    shift
    offload_run "$name" "$n" "${layout[@]}"
    offload_run "$name-off" "$n" "${layout[@]}" "$@" --report
    offload_none_left "$name-off"
    [[ $(wc -l <"$work/$name-off.log") -eq 4 ]] || fail "$name-off: not 4 steps"
    cmp -s "$work/$name.log" "$work/$name-off.log" ||
        fail "$name with the offload differs: $(diff "$work/$name.log" "$work/$name-off.log" | head -4)"
    offload_read_ahead "$name-off" "$n" "$m"
}
same cp 2 4 --cp 2 -- "${params[@]}"
same tpcp 4 4 --tp 2 --cp 2 --sp -- "${params[@]}"
same dpcp 4 2 --cp 2 --dp 2 --zero 2 --recompute full --bucket-mb 0.02 --zero-min-bytes 0 -- \
    "${params[@]}"
echo "offload: parameters under cp 2, tp 2 x cp 2 and dp 2 x cp 2 bitwise equal without it"
