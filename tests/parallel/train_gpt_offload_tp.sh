#!/usr/bin/env bash
# train_gpt --offload params=disk:DIR with tensor parallel (docs/model.md
# "Offload"): each tp rank keeps its own slices of the blocks in its file;
# tp 2 (thread pool), tp 2 with sp under full recompute (the default
# engine) and dp 2 x tp 2 with sp under ZeRO 1 with the moments offloaded
# too give bitwise the losses of the same layout without offload, every
# rank reading each block back ahead of its forward, backward and update;
# a tp 2 run stopped and resumed with the offload on then off, and off
# then on, ends as the run never stopped; no file is left.
set -euo pipefail
source "$(dirname "$0")/offload_env.sh"
job_prefix=offtp
offload_limit=90
# run NAME N ARGS...: an N-rank job writing its losses to $work/NAME.log,
# no file left
run() {
    offload_run "$@"
    offload_none_left "$1"
}
# same NAME N M ARGS...: with and without the offload (ARGS after the
# layout's), bitwise, each of the N ranks reading each of the 4 blocks
# back ahead once per forward and backward of its M micro-batches and
# once per update, 4 steps
same() {
    local name=$1 n=$2 m=$3
    shift 3
    local -a layout=()
    while [[ $# -gt 0 && $1 != -- ]]; do layout+=("$1") && shift; done
    shift
    run "$name" "$n" "${layout[@]}"
    run "$name-off" "$n" "${layout[@]}" "$@" --report
    [[ $(wc -l <"$work/$name-off.log") -eq 4 ]] || fail "$name-off: not 4 steps"
    cmp -s "$work/$name.log" "$work/$name-off.log" ||
        fail "$name with the offload differs: $(diff "$work/$name.log" "$work/$name-off.log" | head -4)"
    offload_read_ahead "$name-off" "$n" "$m"
}
same tp 2 4 --tp 2 -- "${params[@]}" --offload-io threads
same sp 2 4 --tp 2 --sp --recompute full -- "${params[@]}"
same dptp 4 2 --tp 2 --sp --dp 2 --zero 1 --bucket-mb 0.02 --zero-min-bytes 0 -- \
    --offload "params=disk:$work/off,optimizer=disk:$work/off" --offload-chunk 4096

# stopped at step 2 and resumed with the offload on then off, off then on
for how in on-off off-on; do
    before=(--tp 2) after=(--tp 2)
    [[ $how != on-* ]] || before+=("${params[@]}")
    [[ $how != *-on ]] || after+=("${params[@]}")
    rm -rf "$work/ck"
    run "ck-$how" 2 --steps 2 --ckpt-every 2 --ckpt-dir "$work/ck" "${before[@]}"
    run "ck-$how" 2 --ckpt-every 2 --ckpt-dir "$work/ck" --resume "${after[@]}"
    grep -q "resumed from step 2" "$work/ck-$how.out" || fail "$how: no resume: $(tail -5 "$work/ck-$how.out")"
    cmp -s "$work/tp.log" "$work/ck-$how.log" ||
        fail "resumed $how: $(diff "$work/tp.log" "$work/ck-$how.log" | head -4)"
done
echo "offload: parameters under tp 2, sp and dp 2 x tp 2 bitwise equal without it (resumed)"
